"""devbuf.__version__, and devbuf.__git_commit__ (RMM's name): the commit the build came from."""

import re
import subprocess
from pathlib import Path

import pytest

import devbuf


def test_the_version_and_the_commit_are_strings():
    assert isinstance(devbuf.__version__, str) and devbuf.__version__
    assert re.fullmatch(r"([0-9a-f]{40})?", devbuf.__git_commit__), devbuf.__git_commit__


def test_the_commit_is_one_of_this_repository_when_built_from_a_checkout():
    if not devbuf.__git_commit__:
        pytest.skip("built outside a git checkout (a source archive): no commit to name")
    here = Path(__file__).resolve().parent
    found = subprocess.run(["git", "cat-file", "-t", devbuf.__git_commit__], cwd=here, capture_output=True, text=True)
    if found.returncode != 0 and "not a git repository" in found.stderr:
        pytest.skip("the tests run outside a git checkout")
    assert found.stdout.strip() == "commit", found.stderr
