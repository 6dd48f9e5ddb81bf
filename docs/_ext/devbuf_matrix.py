"""The `conformance-matrix` directive: the conformance matrix (`python -m devbuf matrix`), run
while the site is built and written as a table, one row per check and per consumer library, one
column per device, each cell pass / FAIL / skip with its reason in a note below."""

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

import devbuf
from devbuf import _consumers
from devbuf._devbuf import conformance_matrix


def _matrix():
    """(devices, [(check, [cell per device])], notes): one row per check and consumer library."""
    notes: list[str] = []

    def cell(status, reason):
        if status == "pass":
            return "pass"
        if reason not in notes:
            notes.append(reason)
        return f"{status} [{notes.index(reason) + 1}]"

    rows = conformance_matrix()
    devices = [label for label, _ in rows]
    checks = [check for check, _, _ in rows[0][1]] if rows else []
    cells = {label: [cell(status, reason) for _, status, reason in outcomes] for label, outcomes in rows}
    for label in devices:
        cells[label] += [cell(*_consumers.run(check, label)) for _, check in _consumers.CONSUMERS]
    names = checks + [name for name, _ in _consumers.CONSUMERS]
    return devices, [(name, [cells[label][i] for label in devices]) for i, name in enumerate(names)], notes


def _table(header, rows):
    """A docutils table of literal cells (built as nodes: the page may be Markdown or RST)."""
    group = nodes.tgroup(cols=len(header))
    group += [nodes.colspec(colwidth=1) for _ in header]

    def row(values):
        line = nodes.row()
        for value in values:
            line += nodes.entry("", nodes.paragraph("", "", nodes.literal(text=value)))
        return line

    head, body = nodes.thead(), nodes.tbody()
    head += row(header)
    body += [row(values) for values in rows]
    group += [head, body]
    table = nodes.table(classes=["conformance-matrix"])
    table += group
    return table


class ConformanceMatrix(SphinxDirective):
    has_content = False

    def run(self):
        devices, rows, notes = _matrix()
        table = _table(["check"] + devices, [[name] + cells for name, cells in rows])
        # The notes are prose from the checks: text nodes, never parsed as markup.
        listed = nodes.enumerated_list()
        for note in notes:
            listed += nodes.list_item("", nodes.paragraph(text=note))
        doubles = [device.selector for device in devbuf.devices() if device.test_double]
        found = [table, listed]
        if doubles:
            found.append(nodes.paragraph(text=f"NOT hardware: {', '.join(doubles)} (a runtime's test double)."))
        return found


def setup(app):
    app.add_directive("conformance-matrix", ConformanceMatrix)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
