"""The `conformance-matrix` directive: the conformance matrix (`python -m devbuf matrix`), run
while the site is built and written as a table, one row per device, one column per check and per
consumer library, each cell pass / FAIL / skip with its reason in a note below."""

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

import devbuf
from devbuf import _consumers
from devbuf._devbuf import conformance_matrix


def _rows():
    notes: list[str] = []

    def cell(status, reason):
        if status == "pass":
            return "pass"
        if reason not in notes:
            notes.append(reason)
        return f"{status} [{notes.index(reason) + 1}]"

    rows = conformance_matrix()
    checks = [check for check, _, _ in rows[0][1]] if rows else []
    header = ["device"] + checks + [name for name, _ in _consumers.CONSUMERS]
    table = []
    for label, outcomes in rows:
        cells = [cell(status, reason) for _, status, reason in outcomes]
        cells += [cell(*_consumers.run(check, label)) for _, check in _consumers.CONSUMERS]
        table.append([label] + cells)
    return header, table, notes


def _literal(text):
    # A table cell in reStructuredText: one line, with backquotes and pipes made harmless.
    return "``" + text.replace("`", "'").replace("|", "/") + "``" if text else ""


class ConformanceMatrix(SphinxDirective):
    has_content = False

    def run(self):
        header, table, notes = _rows()
        lines = [".. list-table::", "   :header-rows: 1", "   :class: conformance-matrix", ""]
        for row in [header] + table:
            lines.append(f"   * - {_literal(row[0])}")
            lines.extend(f"     - {_literal(value)}" for value in row[1:])
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source="conformance-matrix"), self.content_offset, container)
        # The notes are prose from the checks: text nodes, never parsed as markup.
        listed = nodes.enumerated_list()
        for note in notes:
            listed += nodes.list_item("", nodes.paragraph(text=note))
        doubles = [device.selector for device in devbuf.devices() if device.test_double]
        found = [listed]
        if doubles:
            found.append(nodes.paragraph(text=f"NOT hardware: {', '.join(doubles)} (a runtime's test double)."))
        return container.children + found


def setup(app):
    app.add_directive("conformance-matrix", ConformanceMatrix)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
