"""Sphinx configuration of devbuf's documentation (built by ci/docs with warnings as errors)."""

import pathlib
import sys

import devbuf

sys.path.insert(0, str(pathlib.Path(__file__).parent / "_ext"))

project = "devbuf"
author = "the devbuf authors"
copyright = "the devbuf authors, Apache-2.0"
release = devbuf.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.graphviz",
    "sphinx.ext.intersphinx",
    # Types and protocol-slot docstrings from python/devbuf/_devbuf.pyi.
    "devbuf_stubs",
    # The conformance matrix, measured while the site is built.
    "devbuf_matrix",
    # API names written as code link to their reference entries.
    "devbuf_links",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "_ext"]
myst_heading_anchors = 3

# The API reference follows each module's __all__, so new names appear without editing it.
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# The allocator plugins import the library they plug into, which the docs build need not have.
autodoc_mock_imports = ["cupy", "torch"]
# Docstrings use `name` for code, as the extension's Rust doc comments do.
default_role = "code"

# The figures are graphviz sources in the pages, drawn by Debian's graphviz (ci/setup installs it).
graphviz_output_format = "svg"

# furo keeps wide tables and code inside the page (they scroll), where alabaster's fixed column
# let them spill over.
html_theme = "furo"
html_title = f"devbuf {release}"
