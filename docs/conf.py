"""Sphinx configuration: MyST Markdown pages, the furo theme, autodoc of the installed package.

Build (warnings are errors): ``sphinx-build -W -b html docs docs/_build/html``.
The API reference imports stridedview, compiled module included, so install the
package first (``pip install -e ".[docs]"``).
"""

from importlib.metadata import version as _version

project = "stridedview"
author = "the stridedview authors"
copyright = "the stridedview authors"
release = _version("stridedview")
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# The compiled class embeds its signatures in its docstrings (Cython's
# embedsignature); autodoc reads them from there.
autodoc_docstring_signature = True
autodoc_member_order = "bysource"
autodoc_typehints = "description"

html_theme = "furo"
html_title = f"stridedview {release}"
html_static_path = ["_static"]
