"""Sphinx configuration of devbuf's documentation (built by ci/docs with warnings as errors)."""

import devbuf

project = "devbuf"
author = "the devbuf authors"
copyright = "the devbuf authors, Apache-2.0"
release = devbuf.__version__
version = release

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.intersphinx"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3

# The API reference follows each module's __all__, so new names appear without editing it.
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# The allocator plugins import the library they plug into, which the docs build need not have.
autodoc_mock_imports = ["cupy", "torch"]
# Docstrings use `name` for code, as the extension's Rust doc comments do.
default_role = "code"

html_theme = "alabaster"
html_title = f"devbuf {release}"
