"""The one renderer of a table's Markdown, LaTeX and CSV texts (Tables 1–7 and the pending tables).

Each table module builds its caption, header and cells and calls :func:`render_table_texts`;
:func:`caldera.experiments.report.tables.write_table_files` writes the texts. The LaTeX escaping is the caller's: each
table
passes its own ``(old, new)`` replacements for the header and for the cells, applied in the order given.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any

#: ``(old, new)`` replacements of the LaTeX escaping, applied in order.
Escapes = Sequence[tuple[str, str]]
#: The replacements the tables use.
UNDERSCORE = ("_", "\\_")
ARROW = ("→", "$\\to$")
HASH = ("#", "\\#")
PLUS_MINUS = ("±", "$\\pm$")
PERCENT = ("%", "\\%")


def _escape(text: str, escapes: Escapes) -> str:
    for old, new in escapes:
        text = text.replace(old, new)
    return text


def render_table_texts(caption: str, head: Sequence[str], rows: Iterable[Sequence[str]], csv_head: Sequence[str],
                       csv_rows: Iterable[Sequence[Any]], tex_head_escapes: Escapes = (),
                       tex_cell_escapes: Escapes = ()) -> tuple[str, str, str]:
    """``(md, tex, csv)`` of one table.

    md: the bold caption, a blank line, the header row, a ``|---|`` rule and one row per entry of ``rows``;
    tex: a ``tabular`` of left-aligned columns (booktabs rules), the header escaped with ``tex_head_escapes`` and
    every cell with ``tex_cell_escapes``; csv: ``csv_head`` then ``csv_rows``, the raw values.
    """
    rows = [list(r) for r in rows]
    md = [f"**{caption}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(cells) + " |" for cells in rows]
    tex = ["\\begin{tabular}{" + "l" * len(head) + "}", "\\toprule",
           " & ".join(_escape(h, tex_head_escapes) for h in head) + " \\\\", "\\midrule"]
    tex += [" & ".join(_escape(c, tex_cell_escapes) for c in cells) + " \\\\" for cells in rows]
    tex += ["\\bottomrule", "\\end{tabular}"]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(csv_head)
    w.writerows(csv_rows)
    return "\n".join(md) + "\n", "\n".join(tex) + "\n", buf.getvalue()
