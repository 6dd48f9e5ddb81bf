"""ci/module-cycles sees the cycles it must, on tiny crates written here: through a folder module
(`foo/mod.rs`, `foo.rs` beside `foo/`), through `super::`, and through names re-exported by lib.rs
or a mod.rs; and it sees none where there is none (a parent that only re-exports its children,
test modules, paths in comments and strings). Folder by folder too: a folder's files collapsed into
one node make a cycle no two files make, at the top and below, test modules left out. Run by
ci/test."""

import pytest

from fixture_trees import load_check, tree

module_cycles = load_check("module-cycles")


def crate(root, files):
    return tree(root, {f"src/{name}": text for name, text in files.items()})


def found(root):
    return module_cycles.cycles(module_cycles.Crate(root).edges())


def folder_found(root):
    crate_ = module_cycles.Crate(root)
    return [(parent, component) for parent, component, _ in module_cycles.folder_cycles(crate_, crate_.edges())]


def test_a_cycle_through_a_folder_module_and_its_re_export(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "mod a;\nmod b;\n",
        "a/mod.rs": "mod inner;\npub use inner::Thing;\n",
        "a/inner.rs": "use crate::b::Other;\npub struct Thing(Other);\n",
        "b.rs": "pub struct Other;\npub fn make() -> crate::a::Thing { todo!() }\n",
    })
    assert found(root) == [["a::inner", "b"]]


def test_a_cycle_through_names_lib_rs_re_exports(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "mod x;\nmod y;\npub use x::X;\npub use y::{Y, Z as Renamed};\n",
        "x.rs": "use crate::Renamed;\npub struct X(Renamed);\n",
        "y.rs": "pub struct Y(crate::X);\npub struct Z;\n",
    })
    assert found(root) == [["x", "y"]]


def test_a_cycle_between_a_flat_module_file_its_folder_and_super(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "pub mod foo;\n",
        "foo.rs": "mod bar;\npub struct F;\npub fn run() { bar::work() }\n",
        "foo/bar.rs": "pub fn work() { let _ = super::F; }\n",
    })
    assert found(root) == [["foo", "foo::bar"]]


def test_a_cycle_through_the_crate_root_s_own_items(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "mod queue;\npub const NAME: &str = \"x\";\npub fn open() { queue::Queue::new(); }\n",
        "queue.rs": "pub struct Queue;\nimpl Queue { pub fn new() -> Self { let _ = crate::NAME; Queue } }\n",
    })
    assert found(root) == [["crate", "queue"]]


def test_no_cycle_where_a_parent_only_declares_and_re_exports_its_children(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "pub mod mr;\nmod buffer;\npub use buffer::Buffer;\n",
        "mr/mod.rs": """\
            mod pool;
            pub use pool::Pool;
            /// Not an edge: [`crate::buffer::Buffer`] and "crate::mr::pool::Pool" in a string.
            pub trait Resource {}
            """,
        "mr/pool.rs": "use super::Resource;\npub struct Pool;\nimpl Resource for Pool {}\n",
        "buffer.rs": """\
            use crate::mr::Pool;
            pub struct Buffer(Pool);
            #[cfg(test)]
            mod tests {
                use super::*;
                use crate::mr::Resource;
            }
            """,
    })
    graph = module_cycles.Crate(root).edges()
    assert graph["mr"] == []
    assert graph["mr::pool"] == ["mr"]
    assert graph["buffer"] == ["mr::pool"]
    assert graph["buffer::tests"] == ["buffer", "mr"]
    assert found(root) == []


def test_the_command_fails_on_a_cycle_and_passes_without(tmp_path, capsys):
    cyclic = crate(tmp_path / "cyclic", {
        "lib.rs": "mod a;\nmod b;\n",
        "a.rs": "pub struct A(crate::b::B);\n",
        "b.rs": "pub struct B(Box<crate::a::A>);\n",
    })
    clean = crate(tmp_path / "clean", {"lib.rs": "mod a;\n", "a.rs": "pub struct A;\n"})
    assert module_cycles.main([str(cyclic)]) == 1
    assert "CYCLE in cyclic: a <-> b" in capsys.readouterr().out
    assert module_cycles.main([str(clean)]) == 0


IPC_BETWEEN_LAYERS = {
    "lib.rs": "mod buffer;\nmod interop;\nmod ipc;\n",
    # The trait below `interop` and the functions above `buffer` in one folder.
    "ipc/mod.rs": "mod sharing;\npub use sharing::Sharing;\npub fn export(b: &crate::buffer::Buffer) {}\n",
    "ipc/sharing.rs": "pub trait Sharing {}\n",
    "interop.rs": "pub trait Interop { fn ipc(&self) -> &dyn crate::ipc::Sharing; }\n",
    "buffer.rs": "pub struct Buffer(Box<dyn crate::interop::Interop>);\n",
}


def test_a_cycle_only_folders_make_is_found_and_fails_the_command(tmp_path, capsys):
    root = crate(tmp_path / "layers", IPC_BETWEEN_LAYERS)
    assert found(root) == []
    assert folder_found(root) == [("crate", ["buffer", "interop", "ipc"])]
    assert module_cycles.main([str(root)]) == 1
    out = capsys.readouterr().out
    assert "FOLDER CYCLE in layers, under crate: buffer <-> interop <-> ipc" in out
    assert "interop -> ipc: interop -> ipc::sharing: crate::ipc::Sharing" in out


def test_splitting_the_folder_by_layer_removes_the_cycle(tmp_path):
    root = crate(tmp_path, {
        **{k: v for k, v in IPC_BETWEEN_LAYERS.items() if not k.startswith("ipc/")},
        "lib.rs": "mod buffer;\nmod interop;\nmod ipc;\nmod sharing;\n",
        "sharing.rs": "pub trait Sharing {}\n",
        "ipc.rs": "pub use crate::sharing::Sharing;\npub fn export(b: &crate::buffer::Buffer) {}\n",
    })
    assert found(root) == [] and folder_found(root) == []


def test_a_folder_cycle_below_the_top_is_found_under_its_parent(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "mod mr;\n",
        "mr/mod.rs": "mod pool;\nmod stats;\n",
        "mr/pool/mod.rs": "mod arena;\npub struct Pool;\n",
        "mr/pool/arena.rs": "pub struct Arena(super::super::stats::Stats);\n",
        "mr/stats.rs": "pub struct Stats;\npub fn of(p: &super::pool::Pool) {}\n",
    })
    assert found(root) == []
    assert folder_found(root) == [("mr", ["mr::pool", "mr::stats"])]


def test_what_test_modules_use_makes_no_folder_cycle(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "mod a;\nmod b;\n",
        "a/mod.rs": "mod inner;\n#[cfg(test)]\nmod tests;\npub struct A;\n",
        "a/inner.rs": "pub struct Inner;\n",
        "a/tests.rs": "use crate::b::B;\n",
        "b.rs": "pub struct B(crate::a::A);\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
    })
    assert folder_found(root) == []
    # Not a test module: the same use is an edge, and with it a cycle.
    (root / "src" / "a" / "mod.rs").write_text("mod inner;\nmod tests;\npub struct A;\n")
    assert folder_found(root) == [("crate", ["a", "b"])]


@pytest.mark.parametrize("crate_dir", module_cycles.workspace_crates(), ids=lambda p: p.name)
def test_every_file_of_every_workspace_crate_is_read(crate_dir):
    """Every source file of every target is a module the checker reads (or a file `include!`d by
    one): none is silently skipped."""
    modules = [
        m for root in module_cycles.targets(crate_dir) for m in module_cycles.Crate(crate_dir, root).modules.values()
    ]
    files = {m.path for m in modules} | {f for m in modules for f in m.included}
    assert files == set((crate_dir / "src").rglob("*.rs")), crate_dir
