"""ci/backend-names finds a backend's name compared outside its crate, on a tiny tree written here,
and lets the places that may compare one be: a backend's crate, the host backend, tests and test
modules; kinds named "host" are no backend's name. Run by ci/test."""

from fixture_trees import load_check, tree

backend_names = load_check("backend-names")

NAMES = {"host", "sycl", "cuda", "opencl"}
BACKEND_CRATES = {"devbuf-sycl", "devbuf-cuda"}


def found(root):
    return [line.split(": ", 1)[1] for line in backend_names.comparisons(root, BACKEND_CRATES, NAMES)]


def test_each_form_of_comparison_is_found(tmp_path):
    root = tree(tmp_path, {
        "crates/devbuf-core/src/buffer/transfer.rs": """\
            fn a(q: &Q) -> bool { q.device().backend == crate::kind::HOST }
            fn b(q: &Q) -> bool { HOST != q.device().backend }
            fn c(b: &B) -> bool { b.name() == "sycl" }
            fn d(s: &str) -> bool { selector.starts_with("cuda") }
            fn e(d: &D) -> bool { matches!(d.backend, "opencl" | "sycl") }
            """,
        "python/devbuf/_consumers.py": """\
            a = device.backend == "host"
            b = device.backend in ("cuda", "sycl")
            c = label.startswith("cuda")
            d = 'sycl' != backend.name
            """,
    })
    assert found(root) == [
        "q.device().backend == crate::kind::HOST",
        "HOST != q.device().backend",
        'b.name() == "sycl"',
        'selector.starts_with("cuda"',
        'matches!(d.backend, "opencl" | "sycl"',
        'device.backend == "host"',
        'device.backend in ("cuda", "sycl"',
        'label.startswith("cuda"',
        "'sycl' != backend.name",
    ]


def test_the_python_crate_may_not_name_the_host_backends_types(tmp_path):
    root = tree(tmp_path, {
        "crates/devbuf-py/src/pickle.rs": "let q = shared_queue(py, devbuf::host::HOST)?;\nlet h = HostQueue::shared();\n",
        "crates/devbuf/src/registry.rs": "let b: Box<dyn Backend> = Box::new(HostBackend);\n",
    })
    assert found(root) == ["host::HOST", "HostQueue"]


def test_the_places_that_may_compare_names_are_let_be(tmp_path):
    compare = 'fn f(d: &D) -> bool { d.backend == "sycl" }\n'
    root = tree(tmp_path, {
        "crates/devbuf-sycl/src/queue.rs": compare,
        "crates/devbuf-sycl-sys/src/lib.rs": compare,
        "crates/devbuf-core/src/host/queue.rs": compare,
        "crates/devbuf/src/registry/tests.rs": compare,
        "crates/devbuf-core/src/mr/rmm_resource_tests.rs": compare,
        "crates/devbuf-cuda/tests/it.rs": compare,
        "crates/devbuf-py/tests/it.rs": compare,
        "crates/devbuf-core/src/late.rs": "fn ok() {}\n// d.backend == \"sycl\" in a comment\n#[cfg(test)]\nmod tests {\n" + compare + "}\n",
        "python/devbuf/__main__.py": "# device.backend == 'host' in a comment\n",
    })
    assert found(root) == []


def test_kinds_and_names_that_are_no_backends_are_not_comparisons(tmp_path):
    root = tree(tmp_path, {
        "crates/devbuf-core/src/kind.rs": 'fn p(s: &str) -> K { match s { "host" => K::Host, _ => K::Device } }\n',
        "crates/devbuf/src/registry.rs": "fn f(b: &B, name: &str) -> bool { b.name() == name }\n",
        "python/devbuf/__main__.py": 'ok = kind in ("host", "shared") or kind == "host"\n',
    })
    assert found(root) == []
