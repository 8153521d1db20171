"""Tables for people: aligned plain text for terminals, Markdown and HTML for reports.
One renderer each, shared by every command and report."""
from __future__ import annotations

import html


def text_table(headers: list[str], rows: list[list]) -> str:
    """Columns aligned with two spaces, a dashed rule under the header; None prints empty."""
    cells = [[str(c) for c in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    return [line(headers), "|" + "---|" * len(headers)] + [line(c) for c in rows]


def html_table(headers: list[str], rows: list[list[str]], name_columns: int = 3) -> str:
    """The first `name_columns` cells of a row are names (left-aligned, bold), the rest figures."""
    e = html.escape
    lines = ["<table>", "<tr>" + "".join(f"<th>{e(h)}</th>" for h in headers) + "</tr>"]
    for cells in rows:
        lines.append("<tr>" + "".join(f"<td class='name'>{e(str(c))}</td>" if i < name_columns
                                      else f"<td>{e(str(c))}</td>" for i, c in enumerate(cells)) + "</tr>")
    lines.append("</table>")
    return "\n".join(lines)
