"""Types for the API reference, from the extension's stubs (python/devbuf/_devbuf.pyi).

The compiled module's docstrings (Rust doc comments) say what each name does, but pyo3's
`__text_signature__` carries no types, and its protocol slots (`__getitem__`, `__sub__`) carry
CPython's generic docstrings. The stubs have both the types and those docstrings, and
mypy.stubtest keeps them true to the module, so autodoc takes signatures, return types and
attribute types from them, and a docstring from them where the module has none of its own.
"""

import ast
import pathlib
import re
from dataclasses import dataclass

STUBS = pathlib.Path(__file__).resolve().parents[2] / "python" / "devbuf" / "_devbuf.pyi"
# What CPython gives slot wrappers: not documentation of devbuf's.
GENERIC_DOCSTRINGS = (
    "Return self", "Return len(self)", "Implement ", "Create and return a new object", "Initialize self"
)


@dataclass
class Stub:
    signature: str | None = None
    returns: str | None = None
    type: str | None = None
    doc: str | None = None


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Module-level aliases the stubs write for brevity (`_Kind`, `_Shape`), spelt out for
    readers: a private name is no part of the API, and must not appear in a signature."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.startswith("_") and not name.startswith("__"):
                found[name] = ast.unparse(node.value)
    return found


def _text(node: ast.AST | None, aliases: dict[str, str]) -> str | None:
    if node is None:
        return None
    text = ast.unparse(node)
    for alias, spelt in aliases.items():
        text = re.sub(rf"\b{re.escape(alias)}\b", spelt, text)
    return text


def _function(node: ast.FunctionDef, aliases: dict[str, str], bound: bool) -> Stub:
    args = node.args
    if bound and (args.posonlyargs or args.args):
        # `self` or `cls`: not part of what a caller writes.
        if args.posonlyargs:
            args.posonlyargs = args.posonlyargs[1:]
        else:
            args.args = args.args[1:]
    decorators = {ast.unparse(d) for d in node.decorator_list}
    if "property" in decorators:
        return Stub(type=_text(node.returns, aliases), doc=ast.get_docstring(node))
    return Stub(f"({_text(args, aliases)})", _text(node.returns, aliases), doc=ast.get_docstring(node))


def load(path: pathlib.Path = STUBS) -> dict[str, Stub]:
    """Every stubbed name: `name` for functions, `Class.member` for members."""
    tree = ast.parse(path.read_text())
    aliases = _aliases(tree)
    stubs: dict[str, Stub] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            stubs[node.name] = _function(node, aliases, bound=False)
        elif isinstance(node, ast.ClassDef):
            stubs[node.name] = Stub(doc=ast.get_docstring(node))
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    static = any(ast.unparse(d) == "staticmethod" for d in item.decorator_list)
                    stubs[f"{node.name}.{item.name}"] = _function(item, aliases, bound=not static)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    stubs[f"{node.name}.{item.target.id}"] = Stub(type=_text(item.annotation, aliases))
    return stubs


def _key(name: str) -> str:
    """`devbuf.Array.shape` -> `Array.shape`; `devbuf.mr.PoolMemoryResource` -> `PoolMemoryResource`."""
    parts = name.split(".")
    while parts and parts[0][:1].islower() and len(parts) > 1:
        parts = parts[1:]
    return ".".join(parts)


def setup(app):
    stubs = load()

    def signature(app, what, name, obj, options, signature, return_annotation):
        key = _key(name)
        if what == "class":
            stub = stubs.get(f"{key}.__new__") or stubs.get(f"{key}.__init__")
            if stub and stub.signature:
                return stub.signature, None
            return None
        stub = stubs.get(key)
        if stub and stub.signature:
            return stub.signature, stub.returns
        return None

    def docstring(app, what, name, obj, options, lines):
        stub = stubs.get(_key(name))
        if stub is None:
            return
        # Some docstrings open with a call of their own (`devbuf.asarray(obj, ...)`: a sentence
        # follows it); the typed signature above says the same.
        short = re.escape(name.rsplit(".", 1)[-1])
        if lines and (call := re.match(rf"`(?:[\w.]+\.)?{short}\([^`]*\)`[:,]?\s*", lines[0])):
            rest = lines[0][call.end():]
            lines[0] = rest[:1].upper() + rest[1:]
        generic = not lines or lines[0].startswith(GENERIC_DOCSTRINGS)
        if generic and stub.doc:
            lines[:] = stub.doc.splitlines()
        elif generic:
            lines[:] = []
        if stub.type and what in ("attribute", "property", "data"):
            lines[:0] = [f"*Type:* ``{stub.type}``", ""]

    app.connect("autodoc-process-signature", signature)
    app.connect("autodoc-process-docstring", docstring)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
