"""The one renderer of a table's Markdown, LaTeX and CSV texts (caldera.experiments.report.table_render)."""

from __future__ import annotations

from caldera.experiments.report.table_render import ARROW, HASH, PERCENT, PLUS_MINUS, UNDERSCORE, render_table_texts


def test_two_rows_with_escapes():
    head = ["Method", "B_LR", "Rank (paper → ours)"]
    rows = [["CALDERA #1", "4", "64 → 8"], ["QuIP_sharp", "—", "12.5 ± 0.3 %"]]
    csv_rows = [["CALDERA #1", 4, None], ["QuIP_sharp", None, 12.5]]
    md, tex, csv = render_table_texts("Table X: a caption", head, rows, ["method", "b_lr", "value"], csv_rows,
                                      (UNDERSCORE, ARROW), (HASH, PLUS_MINUS, ARROW, UNDERSCORE, PERCENT))
    assert md == ("**Table X: a caption**\n"
                  "\n"
                  "| Method | B_LR | Rank (paper → ours) |\n"
                  "|---|---|---|\n"
                  "| CALDERA #1 | 4 | 64 → 8 |\n"
                  "| QuIP_sharp | — | 12.5 ± 0.3 % |\n")
    assert tex == ("\\begin{tabular}{lll}\n"
                   "\\toprule\n"
                   "Method & B\\_LR & Rank (paper $\\to$ ours) \\\\\n"
                   "\\midrule\n"
                   "CALDERA \\#1 & 4 & 64 $\\to$ 8 \\\\\n"
                   "QuIP\\_sharp & — & 12.5 $\\pm$ 0.3 \\% \\\\\n"
                   "\\bottomrule\n"
                   "\\end{tabular}\n")
    assert csv == "method,b_lr,value\r\nCALDERA #1,4,\r\nQuIP_sharp,,12.5\r\n"


def test_escapes_apply_in_the_given_order():
    """Each table passes its own escapes; an escape whose output another would rewrite shows the order."""
    rows = [["a_b"]]
    _, first, _ = render_table_texts("c", ["h"], rows, ["h"], rows, (), (UNDERSCORE, ("\\", "/")))
    _, second, _ = render_table_texts("c", ["h"], rows, ["h"], rows, (), (("\\", "/"), UNDERSCORE))
    assert "a/_b \\\\" in first.splitlines()
    assert "a\\_b \\\\" in second.splitlines()
    _, plain, _ = render_table_texts("c", ["h_h"], rows, ["h"], rows)  # no escapes: the texts as given
    assert plain.splitlines()[2:5] == ["h_h \\\\", "\\midrule", "a_b \\\\"]
