"""What the fixture tests of ci/'s source checks share (test_backend_names.py,
test_module_cycles.py, test_ordering_guard.py): the check script, loaded as a module (it has no
.py suffix), and a tiny tree of source files written for it to read."""

import importlib.machinery
import importlib.util
import pathlib
import textwrap

CI = pathlib.Path(__file__).resolve().parent


def load_check(script):
    """The ci/ script named `script` (e.g. "backend-names"), as a module."""
    name = script.replace("-", "_")
    loader = importlib.machinery.SourceFileLoader(name, str(CI / script))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


def tree(root, files):
    """Writes `files` (path relative to `root` → text, dedented) under `root`; returns `root`."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root
