"""API names written as code in any page link to their reference entries.

The guide and the cookbook write names as inline code (`devbuf.alloc`, `Array.copy_from(source)`,
`asarray(x, copy=None)`, `mr.statistics`); each such literal whose name is one the API reference
documents becomes a link to that entry. A name is looked up as written, then under `devbuf.` and
`devbuf.mr.`; only a name with a dot or a call may also be a class member (`Array.copy_from`).
Anything else (an argument such as `copy`, a variable's method such as `x.view`) stays plain code.
"""

import re

from docutils import nodes
from sphinx import addnodes

# A name, alone or called: `alloc`, `Array.copy_from(source)`, `devbuf.mr.replay(log, mr)`.
NAME = re.compile(r"([A-Za-z_][\w.]*)(\(.*\))?", re.S)
PREFIXES = ("", "devbuf.", "devbuf.mr.")


def _target(text, objects):
    """The reference entry (`docname`, anchor) the literal `text` names, if one does."""
    match = NAME.fullmatch(text.strip())
    if match is None:
        return None
    name, called = match.groups()
    if name.endswith(".") or (name[0].islower() and "." in name and not name.startswith(("devbuf.", "mr."))):
        return None  # `x.view(...)`: a variable's method
    for prefix in PREFIXES:
        entry = objects.get(prefix + name)
        if entry is not None and (called or "." in name or entry.objtype != "method"):
            return entry.docname, entry.node_id
    return None


def link_names(app, doctree, docname):
    objects = app.env.get_domain("py").objects
    builder = app.builder
    for literal in list(doctree.findall(nodes.literal)):
        if any(isinstance(up, (nodes.reference, addnodes.desc_signature)) for up in _ancestors(literal)):
            continue
        target = _target(literal.astext(), objects)
        if target is None:
            continue
        target_doc, anchor = target
        uri = builder.get_relative_uri(docname, target_doc) + "#" + anchor
        reference = nodes.reference("", "", internal=True, refuri=uri, reftitle=anchor)
        literal.replace_self(reference)
        reference += literal


def _ancestors(node):
    node = node.parent
    while node is not None:
        yield node
        node = node.parent


def setup(app):
    app.connect("doctree-resolved", link_names)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
