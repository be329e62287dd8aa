"""The paper's checkable claims, declared: one :class:`ClaimEntry` per claim, in the order ``claims.md`` states them.

Each entry says where the paper makes the claim (``source``), what it is decided on (``kind``: the run's Figure 3 /
4 data, the zero-shot tables, Table 5, Table 6, …), what it compares (``compares``: two ablation runs, or two
:class:`Side` s of a table's rows), the number each comparison measures (``statistic``) and its decision rule
(``rule``, a name of :mod:`caldera.experiments.report.claim_rules`). :func:`caldera.experiments.report.claims.check`
decides every entry of :data:`REGISTRY`, and after them those a run's config declares (:func:`declared_entry`),
dispatching on its kind;
:func:`caldera.experiments.report.selection_report.ablation_claims` decides the Figure 3 / 4 entries again under
the selected configuration, and :mod:`caldera.experiments.report.matrix` the Figure 3 entries on seeded matrices.

A claim about a table's rows holds for every block of rows (one table, one paper model) that has the rows it names,
and is stated once per distinct pair of variants (Table 1's 7B, 13B and 70B rows map to the same stand-in
variants); an entry bound to one ``table`` and ``paper_model`` is stated exactly once, "not testable at this
scale" where the run has no measured row for a side. Adding a claim: one entry here and its test (or, for one
run, an item of its config's ``claims:`` list).

This module imports nothing of :mod:`caldera` but the rules' names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caldera.experiments.report.claim_rules import COUNT_RULES, DIRECTION_RULES, RELATIONS, RULES

# ---------------------------------------------------------------------------------------------- kinds
#: Figure 3: final data-aware error of two ablation runs on every matrix×rank pair
FIGURE3 = "figure 3 final errors"
#: Figure 3: the error at outer iteration 2 of two runs (the Hessian update's speed)
CONVERGENCE = "figure 3 second iterate"
#: Figure 4: every LPLRFactorize curve against its first iterate
FIGURE4 = "figure 4 curves"
#: entries decided by the job that wrote them (the workflow's compression summaries), listed here
GIVEN = "given"
#: two rows (or one row and every other) of each block of the zero-shot tables
TABLE = "table rows"
#: each ``extra_methods`` row against CALDERA and QuIP# at the nearest bits
EXTRA_METHODS = "extra methods"
#: the LLaMa-3 stand-in's loss against the LLaMa-2 stand-in's, row by row of Tables 1 and 2
FAMILIES = "model families"
#: each RHT fine-tuned row of Tables 3-4 against the realization it started from
RHTFT = "rht fine-tuning"
#: Table 5's fine-tuned rows against their un-fine-tuned and dense models
LORA = "lora fine-tuning"
#: two sides of Table 6's rows, timed in the same interleaved rounds
THROUGHPUT = "throughput"
KINDS = (FIGURE3, CONVERGENCE, FIGURE4, GIVEN, TABLE, EXTRA_METHODS, FAMILIES, RHTFT, LORA, THROUGHPUT)

# ---------------------------------------------------------------------------------------------- statistics
FINAL_ERROR = "final data-aware error"
SECOND_ERROR = "data-aware error at outer iteration 2"
LPLR_ERROR = "lowest error after the first iterate vs the first"
PPL_RATIO = "Wiki2 perplexity ratio A / B"
PPL_RATIO_EACH = "Wiki2 perplexity ratio A / each row of B"
ZS_MARGIN = "zero-shot correct-choice margin A − B"
FAMILY_RATIO = "log(LLaMa-3 ppl ratio to unquantized) − log(LLaMa-2's), matched rows"
FT_RATIO = "Wiki2 perplexity ratio fine-tuned / its base"
LORA_DIRECTIONS = "per task: fine-tuned vs un-fine-tuned and vs dense"
ROUND_RATIO = "tokens/s ratio A / B per interleaved round"
#: the statistics a table entry can compare its two sides on
TABLE_STATISTICS = (PPL_RATIO, PPL_RATIO_EACH, ZS_MARGIN)

#: how a :class:`Side` takes its row(s) from a block (never by this run's outcome)
PICKS = ("highest rank", "first", "first held", "every")


def _rank(x: Any) -> int | None:
    return None if x in (None, "", "—") else int(x)


@dataclass(frozen=True)
class Row:
    """A paper row as a table JSON names it: its method label starts with ``method`` ("CALDERA", "QuIP#",
    "Uncompressed"), its factor bits B_LR are ``b_lr`` ("4", "16"; "—": no low-rank factors; None: any) and its
    paper rank is ``rank`` (None: any)."""

    method: str
    b_lr: str | None = None
    rank: int | None = None

    def matches(self, method: str, b_lr: str, rank: Any) -> bool:
        """Is the row labelled ``method`` with B_LR ``b_lr`` (as :func:`caldera.experiments.report.verdicts.row_bits`
        prints it) and paper rank ``rank`` this one?"""
        return (method.startswith(self.method) and (self.b_lr is None or b_lr == self.b_lr)
                and (self.rank is None or _rank(rank) == self.rank))


@dataclass(frozen=True)
class Side:
    """One side of a comparison: of a block's rows that match one of ``rows``, ``pick`` takes

    * "highest rank": the one with the highest paper rank (the first of equals);
    * "first": the first in the table's order;
    * "first held": the first of ``rows``, in this order, that the block has (a paper row, then the row that
      stands for it where the paper's table has no such row);
    * "every": all of them.
    """

    rows: tuple[Row, ...]
    pick: str

    def __post_init__(self) -> None:
        if self.pick not in PICKS:
            raise ValueError(f"side pick {self.pick!r}: give one of {PICKS}")
        if not self.rows:
            raise ValueError("a side names at least one row")

    def matches(self, method: str, b_lr: str, rank: Any) -> bool:
        return any(r.matches(method, b_lr, rank) for r in self.rows)


@dataclass(frozen=True)
class ClaimEntry:
    """One claim of the paper, declared: ``claim`` (the text claims.md states), ``source`` (where the paper makes
    it), ``kind`` (:data:`KINDS`: what it is decided on), ``statistic`` (the number each comparison measures),
    ``rule`` (:data:`caldera.experiments.report.claim_rules.RULES`), ``compares`` (Figure 3: the two runs, a
    preset or "quip#"/"quip#-lr"; table rows and Table 6: two :class:`Side` s, A and B), ``relation`` (Figure 3:
    the name of the relation of the two runs' errors, :data:`~caldera.experiments.report.claim_rules.RELATIONS`)
    and, for a claim on one block of one table, its ``table`` and ``paper_model``."""

    claim: str
    source: str
    kind: str
    statistic: str
    rule: str
    compares: tuple = ()
    relation: str = ""
    table: str | None = None
    paper_model: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.kind not in KINDS:
            problems.append(f"kind {self.kind!r} is not one of {KINDS}")
        if self.rule not in RULES:
            problems.append(f"rule {self.rule!r} is not one of {RULES}")
        if self.kind in (FIGURE3, CONVERGENCE, FIGURE4) and self.rule not in COUNT_RULES:
            problems.append(f"a Figure 3 / 4 claim takes a counting rule {COUNT_RULES}, not {self.rule!r}")
        if self.kind == FIGURE3 and (self.relation not in RELATIONS or len(self.compares) != 2):
            problems.append(f"a Figure 3 claim compares two runs by one of {sorted(RELATIONS)}")
        if self.kind in (TABLE, THROUGHPUT):
            if len(self.compares) != 2 or not all(isinstance(s, Side) for s in self.compares):
                problems.append("a table claim compares two sides (Side A, Side B)")
            if self.rule not in DIRECTION_RULES:
                problems.append(f"a table claim takes a direction rule {DIRECTION_RULES}, not {self.rule!r}")
        if self.kind == TABLE and not problems:
            if self.statistic not in TABLE_STATISTICS:
                problems.append(f"statistic {self.statistic!r} is not one of {TABLE_STATISTICS}")
            each = self.statistic == PPL_RATIO_EACH
            if (self.compares[1].pick == "every") != each or self.compares[0].pick == "every":
                problems.append(f"side B takes every row exactly for {PPL_RATIO_EACH!r}; side A takes one row")
        if (self.table is None) != (self.paper_model is None):
            problems.append("a claim bound to one block names both its table and its paper model")
        if problems:
            raise ValueError(f"claim {self.claim!r}: " + "; ".join(problems))


def _fig3(claim: str, a: str, b: str, relation: str, rule: str) -> ClaimEntry:
    return ClaimEntry(claim, "App. G.1 / Fig. 3", FIGURE3, FINAL_ERROR, rule, (a, b), relation)


CALDERA_4BIT = Row("CALDERA", "4")
HIGHEST_4BIT_CALDERA = Side((CALDERA_4BIT,), "highest rank")
#: the paper's best 4-bit CALDERA row at ≤ 2.4 bits in Tables 1, 2 and 7: rank 256
PAPER_BEST_CALDERA = Side((Row("CALDERA", "4", 256),), "first held")
#: the paper's best QuIP# row at ≤ 2.4 bits: with rank-64 16-bit factors (LLaMa-2 7B, LLaMa-3 8B), else without
#: factors (the only QuIP# row of LLaMa-2 13B / 70B and Mistral 7B)
PAPER_BEST_QUIP = Side((Row("QuIP#", "16", 64), Row("QuIP#", "—", 0)), "first held")

#: every claim claims.md states, in its order
REGISTRY: tuple[ClaimEntry, ...] = (
    _fig3("16-bit CALDERA below QuIP# (+LR) in data-aware error", "16bit-factors", "quip#-lr", "a < b", "all"),
    _fig3("4-bit factors slightly above 16-bit (≤ 10% higher)", "4bit-factors", "16bit-factors", "b ≤ a ≤ 1.1 b",
          "all"),
    _fig3("no-LDLQ much worse (> 1.25× the 4-bit error)", "4bit-no-ldlq", "4bit-factors", "a > 1.25 b", "all"),
    _fig3("no-RHT worse for some matrices", "4bit-no-rht", "4bit-factors", "a > b", "some"),
    ClaimEntry("Hessian update speeds convergence (lower error at outer iteration 2)", "App. E.2 / G.1", CONVERGENCE,
               SECOND_ERROR, "most", ("16bit-hessian-update", "16bit-factors"), "a < b"),
    ClaimEntry("LPLRFactorize iterations lower the error", "App. G.1 / Fig. 4", FIGURE4, LPLR_ERROR, "all"),
    ClaimEntry("CALDERA's calibration data-aware error below QuIP#'s for every compressed matrix",
               "§5 / App. G.1 (compression logs)", GIVEN, "calibration data-aware error per matrix", "given"),
    ClaimEntry("highest-rank 4-bit CALDERA has the lowest Wiki2 perplexity among compressed rows", "Tables 1, 2, 7",
               TABLE, PPL_RATIO_EACH, "lower",
               (HIGHEST_4BIT_CALDERA, Side((Row("CALDERA"), Row("QuIP#")), "every"))),
    ClaimEntry("4-bit CALDERA beats QuIP# in Wiki2 perplexity (the paper's best rows, ≤ 2.4 bits: CALDERA k=256 "
               "B_LR=4 vs QuIP# k=64 B_LR=16, else QuIP# without LR)", "Tables 1, 2, 7", TABLE, PPL_RATIO, "lower",
               (PAPER_BEST_CALDERA, PAPER_BEST_QUIP)),
    ClaimEntry("4-bit CALDERA beats QuIP# zero-shot (the same rows; all tasks pooled)", "Tables 1, 2, 7", TABLE,
               ZS_MARGIN, "higher", (PAPER_BEST_CALDERA, PAPER_BEST_QUIP)),
    ClaimEntry("4-bit rank-256 CALDERA beats 16-bit rank-64 at equal bits (Wiki2 ppl)", "Tables 1, 2", TABLE,
               PPL_RATIO, "lower", (HIGHEST_4BIT_CALDERA, Side((Row("CALDERA", "16"),), "first"))),
    ClaimEntry("an extra method beats CALDERA and QuIP# at the nearest bits in Wiki2 perplexity",
               "extra_methods (this project)", EXTRA_METHODS, PPL_RATIO, "lower"),
    ClaimEntry("LLaMa-3 degrades more than LLaMa-2 under compression (second model family)", "§5.1, Tables 1–2",
               FAMILIES, FAMILY_RATIO, "higher"),
    ClaimEntry("RHT fine-tuning lowers perplexity", "§5.2, Tables 3–4", RHTFT, FT_RATIO, "lower"),
    ClaimEntry("LoRA fine-tuning recovers accuracy", "Table 5", LORA, LORA_DIRECTIONS, "recovers"),
    ClaimEntry("Compressed models generate faster than the uncompressed one (every CALDERA and QuIP# row vs dense)",
               "§5.4, Table 6", THROUGHPUT, ROUND_RATIO, "higher",
               (Side((Row("CALDERA"), Row("QuIP#")), "every"), Side((Row("Uncompressed"),), "every"))),
    ClaimEntry("CALDERA generates slower than QuIP# (QuIP# faster than every CALDERA row)", "§5.4, Table 6",
               THROUGHPUT, ROUND_RATIO, "higher",
               (Side((Row("QuIP#"),), "every"), Side((Row("CALDERA"),), "every"))),
    ClaimEntry("16-bit factors generate faster than 4-bit factors (CALDERA rank 64 B_LR 16 vs every 4-bit row)",
               "§5.4, Table 6", THROUGHPUT, ROUND_RATIO, "higher",
               (Side((Row("CALDERA", "16"),), "every"), Side((CALDERA_4BIT,), "every"))),
)


def entries(kind: str, registry: tuple[ClaimEntry, ...] = REGISTRY) -> tuple[ClaimEntry, ...]:
    """The entries of ``kind``, in registry order."""
    return tuple(e for e in registry if e.kind == kind)


def the(kind: str) -> ClaimEntry:
    """The one entry of ``kind`` (a kind declared once: the convergence, Figure 4, given, family, fine-tuning
    claims)."""
    (e,) = entries(kind)
    return e


LPLR_CLAIM = the(FIGURE4).claim
RHTFT_CLAIM = the(RHTFT).claim
LORA_CLAIM = the(LORA).claim

#: what claims.md states for a kind whose input this run does not have: claim, source
UNMEASURED: dict[str, tuple[str, str]] = {
    RHTFT: (RHTFT_CLAIM, "Tables 3–4"),
    LORA: (LORA_CLAIM, the(LORA).source),
    THROUGHPUT: ("Throughput ordering: QuIP# > CALDERA 16-bit > CALDERA 4-bit > dense", "Table 6"),
}

#: a config's ``claims[].statistic`` → the statistic it names
CONFIG_STATISTICS = {"wiki2_ppl": PPL_RATIO, "zeroshot_margin": ZS_MARGIN}


def declared_entry(item: Any) -> ClaimEntry:
    """The entry of one item of a config's ``claims:`` list (its settings,
    :class:`caldera.experiments.planning.settings.ClaimSettings`): paper row ``a`` against paper row ``b`` (each by
    method, paper rank and B_LR) of one block (``table``, ``paper_model``), on ``statistic`` by ``rule``."""

    def side(row: Any) -> Side:
        return Side((Row(row.method, "—" if row.b_lr is None else str(row.b_lr), row.rank),), "first held")

    return ClaimEntry(item.claim, item.source, TABLE, CONFIG_STATISTICS[item.statistic], item.rule,
                      (side(item.a), side(item.b)), table=item.table, paper_model=item.paper_model)
