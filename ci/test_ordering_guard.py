"""ci/ordering-guard finds a runtime ordering primitive called outside the ordering module, on a
tiny tree written here, and lets the places that may call one be: the ordering module, a backend's
crate, the host backend, the conformance kit, tests, test modules, and its own allow-list (whose
unused entries it reports too). Run by ci/test."""

from fixture_trees import load_check, tree

ordering_guard = load_check("ordering-guard")

CALL = "fn f(queue: &Q, event: &E) { queue.wait_event(event).unwrap(); }\n"


def test_a_call_outside_the_module_is_found(tmp_path):
    root = tree(tmp_path, {"crates/devbuf-core/src/exchange.rs": CALL, "crates/devbuf-py/src/a.rs": "x.wait()\n"})
    found = ordering_guard.calls(root, set(), allowed={})
    assert [line.split(":")[0] for line in found] == ["crates/devbuf-core/src/exchange.rs", "crates/devbuf-py/src/a.rs"]


def test_the_places_that_may_call_them_are_let_be(tmp_path):
    root = tree(tmp_path, {
        "crates/devbuf-core/src/ordering/streams.rs": CALL,
        "crates/devbuf-core/src/buffer/ordering/mod.rs": CALL,
        "crates/devbuf-core/src/host/queue.rs": CALL,
        "crates/devbuf-core/src/conformance/checks.rs": CALL,
        "crates/devbuf-core/src/buffer/tests.rs": CALL,
        "crates/devbuf-core/src/mr/rmm_resource_tests.rs": CALL,
        "crates/devbuf-core/tests/it.rs": CALL,
        "crates/devbuf-xyz/src/queue.rs": CALL,
        "crates/devbuf-core/src/late.rs": "fn ok() {}\n// queue.wait_event(e) in a comment\n#[cfg(test)]\nmod tests {\n" + CALL + "}\n",
    })
    assert ordering_guard.calls(root, {"devbuf-xyz"}, allowed={}) == []


def test_the_allow_list_lets_its_places_be_and_reports_unused_entries(tmp_path):
    root = tree(tmp_path, {"crates/devbuf-core/src/event.rs": "self.0.wait()\n"})
    allowed = {("crates/devbuf-core/src/event.rs", ".wait()"): "why", ("crates/devbuf-core/src/gone.rs", ".wait()"): "why"}
    assert ordering_guard.calls(root, set(), allowed=allowed) == [
        "crates/devbuf-core/src/gone.rs: .wait() is allowed but no longer called there"
    ]


def test_a_backend_crate_devbuf_does_not_link_is_found_by_its_descriptor(tmp_path):
    root = tree(tmp_path, {
        "crates/devbuf-skeleton/src/backend.rs": "pub const DESCRIPTOR: BackendDescriptor = BackendDescriptor {\n};\n",
        "crates/devbuf-other/src/backend.rs": "// pub const DESCRIPTOR: BackendDescriptor in a comment\n",
    })
    assert ordering_guard.unlinked_backends(root) == {"devbuf-skeleton"}
