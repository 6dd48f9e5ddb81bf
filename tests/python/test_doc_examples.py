"""Every Python example of README.md and of the documentation (docs/) runs as written, each as a script of its own in a fresh
interpreter (so an example cannot lean on another's names, and spawn's `__main__` rules apply).

Each example is a ```python block after an `<!-- example -->` comment, which may say what it needs:
`<!-- example: needs sycl dpnp -->`. A backend it needs is skipped with the backend's reason, or
fails where DEVBUF_REQUIRE names it (the CUDA ones run on the CUDA test driver in ci/test); `gpu`
is a CUDA device that is real hardware, not a test double (those examples launch kernels, and run
in ci/gpu); a module it needs (`cuda.core` included) is skipped when it is not installed."""

import importlib.util
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


@pytest.mark.parametrize("marked, needs, code", README_EXAMPLES + DOCS_EXAMPLES)
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
