"""Every Python example of README.md, of the documentation (docs/) and of the API's docstrings
runs as written, each as a script of its own in a fresh interpreter (so an example cannot lean on
another's names, and spawn's `__main__` rules apply).

In Markdown, each example is a ```python block after an `<!-- example -->` comment, which may say
what it needs: `<!-- example: needs sycl dpnp -->`. In a docstring (every module, class and
function of the package, and of the extension module), each example is a reST literal block (a
paragraph ending in `::`, then the indented code), after an optional comment that says what it
needs: `.. example: needs cuda numba`; an indented block without `::` would render as prose, and
is a failure. A backend it needs is skipped with the backend's reason, or fails where
DEVBUF_REQUIRE names it (the CUDA ones run on the CUDA test driver in ci/test); `gpu` is a CUDA
device that is real hardware, not a test double (those examples launch kernels, and run in
ci/gpu); a module it needs (`cuda.core` included) is skipped when it is not installed."""

import ast
import importlib.util
import inspect
import pathlib
import re
import subprocess
import sys

import pytest

import devbuf
from conftest import require_backend, require_numba_kernels

ROOT = pathlib.Path(__file__).resolve().parents[2]
BACKENDS = {backend.name for backend in devbuf.backends()}
BLOCK = re.compile(r"(?:<!-- example(?::\s*needs ([\w. ]+))? -->\n)?```python\n(.*?)```", re.S)


def examples(path):
    text = path.read_text()
    name = path.relative_to(ROOT)
    found = []
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        marked = match.group(0).startswith("<!--")
        needs = (match.group(1) or "").split()
        found.append(pytest.param(marked, needs, match.group(2), id=f"{name}:{line}-{'-'.join(needs) or 'any'}"))
    return found


def docstring_examples(doc, name):
    """The literal blocks of docstring `doc` as examples (with what each needs), and the indented
    blocks that are not literal blocks (a missing `::`: rendered as prose)."""
    lines = inspect.cleandoc(doc).splitlines()
    found, unmarked, needs = [], [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = re.fullmatch(r"\.\. example:(?:\s*needs ([\w. ]+))?\s*", line.strip())
        if marker:
            needs = (marker.group(1) or "").split()
        starts_block = i + 1 < len(lines) and not lines[i + 1].strip()
        indent = len(line) - len(line.lstrip())
        if line.strip() and starts_block:
            block_start = i + 2
            block_end = block_start
            while block_end < len(lines) and (not lines[block_end].strip() or len(lines[block_end]) - len(lines[block_end].lstrip()) > indent):
                block_end += 1
            block = lines[block_start:block_end]
            deeper = block and len(block[0]) - len(block[0].lstrip()) > indent
            if deeper and line.rstrip().endswith("::") and not line.strip().startswith(".. ") or deeper and line.strip() == "::":
                code = inspect.cleandoc("\n".join(block))
                found.append(pytest.param(True, needs, code + "\n", id=f"docstring:{name}-{'-'.join(needs) or 'any'}"))
                needs = []
                i = block_end
                continue
            if deeper and not line.strip().startswith(".. "):
                unmarked.append(f"{name}: the indented block after {line.strip()!r} renders as prose (end that line with '::')")
        i += 1
    return found, unmarked


def package_docstrings():
    """(name, docstring) of every module, class and function of the package (read from its
    sources, so that modules of libraries not installed here count too) and of the extension
    module's classes, their members and its functions."""
    found = []
    for path in sorted((ROOT / "python" / "devbuf").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT / "python").with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    found.append((module if isinstance(node, ast.Module) else f"{module}.{node.name}", doc))
    extension = devbuf._devbuf
    for name, value in vars(extension).items():
        if inspect.isclass(value) or callable(value):
            if value.__doc__:
                found.append((f"devbuf.{name}", value.__doc__))
            for member in vars(value) if inspect.isclass(value) else []:
                # Through getattr: a static method's own docstring, not staticmethod's.
                attribute = getattr(value, member, None)
                doc = getattr(attribute, "__doc__", None)
                if doc and not isinstance(attribute, (str, int, bytes, tuple, dict)) and doc != type(attribute).__doc__:
                    found.append((f"devbuf.{name}.{member}", doc))
    return found


DOCSTRINGS = package_docstrings()
DOCSTRING_EXAMPLES = [example for name, doc in DOCSTRINGS for example in docstring_examples(doc, name)[0]]
README_EXAMPLES = examples(ROOT / "README.md")
DOCS_EXAMPLES = [example for page in sorted((ROOT / "docs").rglob("*.md")) for example in examples(page)]


def test_the_readme_and_the_docs_have_examples():
    assert len(README_EXAMPLES) >= 1 and len(DOCS_EXAMPLES) >= 30
    cookbook = {path.stem for path in (ROOT / "docs" / "cookbook").glob("*.md")} - {"index"}
    # Every cookbook page has examples that run.
    for page in cookbook:
        assert len(examples(ROOT / "docs" / "cookbook" / f"{page}.md")) >= 1, page


def require_gpu():
    """Skips unless a CUDA device is real hardware (the CUDA test driver runs no kernels)."""
    require_backend("cuda")
    if not any(d.backend == "cuda" and d.usable and not d.test_double for d in devbuf.devices()):
        pytest.skip("needs a GPU: the CUDA devices here are a test double (ci/gpu runs this)")


def test_docstring_examples_are_literal_blocks():
    # The module docstrings that hold the setup RMM's users copy have their examples.
    names = {example.id.split(":", 1)[1].rsplit("-", 1)[0].split("-")[0] for example in DOCSTRING_EXAMPLES}
    assert {"devbuf.mr", "devbuf.mr.statistics", "devbuf.allocators.numba"} <= names, names
    unmarked = [problem for name, doc in DOCSTRINGS for problem in docstring_examples(doc, name)[1]]
    assert not unmarked, "\n".join(unmarked)


def test_the_docstring_checker_finds_examples_and_prose_blocks():
    doc = """Summary.

    .. example: needs cuda numba

    Setup::

        import numba
        x = 1

    Text that introduces no code:

        looks_like_code()

    Then::

        print(2)
    """
    found, unmarked = docstring_examples(doc, "fixture")
    assert [(example.values[1], example.values[2]) for example in found] == [
        (["cuda", "numba"], "import numba\nx = 1\n"), ([], "print(2)\n")]
    assert len(unmarked) == 1 and "'Text that introduces no code:'" in unmarked[0]


@pytest.mark.parametrize("marked, needs, code", README_EXAMPLES + DOCS_EXAMPLES + DOCSTRING_EXAMPLES)
def test_example_runs(marked, needs, code, tmp_path):
    assert marked, "every Python block is an example that runs: mark it <!-- example -->"
    for need in needs:
        if need == "gpu":
            require_gpu()
        elif need in BACKENDS:
            require_backend(need)
        elif importlib.util.find_spec(need) is None:
            pytest.skip(f"needs {need}, which is not installed")
        elif need == "numba" and "gpu" in needs:
            require_numba_kernels()
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
