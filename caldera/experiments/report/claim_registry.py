"""Claims that more than one module decides: their names, and for Figure 3 the comparisons that decide them.

:func:`caldera.experiments.report.claims.check` decides them on the run's Figure 3 / 4 curves, and
:func:`caldera.experiments.report.selection_report.ablation_claims` again under the selected configuration; both
import them from here (this module imports nothing of :mod:`caldera.experiments`), and
:mod:`caldera.experiments.report.claims` re-exports them.
"""

from __future__ import annotations

from typing import Callable

#: The App. G.1 / Figure 3 comparisons: (claim, run a, run b, predicate on (final error of a, final error of b),
#: "all" or "some" of the matrix×rank pairs). Runs are the ablation presets' names and "quip#-lr".
ABLATION_CLAIMS: tuple[tuple[str, str, str, Callable[[float, float], bool], str], ...] = (
    ("16-bit CALDERA below QuIP# (+LR) in data-aware error", "16bit-factors", "quip#-lr", lambda x, y: x < y, "all"),
    ("4-bit factors slightly above 16-bit (≤ 10% higher)", "4bit-factors", "16bit-factors",
     lambda x, y: y <= x <= 1.1 * y, "all"),
    ("no-LDLQ much worse (> 1.25× the 4-bit error)", "4bit-no-ldlq", "4bit-factors", lambda x, y: x > 1.25 * y, "all"),
    ("no-RHT worse for some matrices", "4bit-no-rht", "4bit-factors", lambda x, y: x > y, "some"),
)
LPLR_CLAIM = "LPLRFactorize iterations lower the error"


def pairs_verdict(k: int, n: int, need: str) -> str:
    """The verdict of a Figure 3 comparison that ``k`` of its ``n`` matrix×rank pairs satisfy: **holds** when
    ``need`` is "all" and every pair does, or "some" and at least one does; **fails** otherwise (no pairs: fails)."""
    if need not in ("all", "some"):
        raise ValueError(f"quantifier {need!r}: give 'all' or 'some'")
    return "holds" if n > 0 and (k == n if need == "all" else k > 0) else "fails"
