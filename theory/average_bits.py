"""App. E.5 — computation of the average bit budget per parameter (label
``subapp:computation_of_per_parameter_bit_budget``).

Statement: *"if the full-rank matrix Q has a bit budget of B_Q, the factors L and R both have a bit budget of
B_LR, and the rank of the factors is k, the average number of bits per parameter is
Σ_{i=1}^7 (B_Q n_i d_i + k B_LR (n_i + d_i)) / Σ_{i=1}^7 n_i d_i"*, and with r = 64 factors fine-tuned in
16-bit precision *"Σ_i (B_Q n_i d_i + (k − r) B_LR (n_i + d_i) + 16 r (n_i + d_i)) / Σ_i n_i d_i"*.

What is checked: every printed "Avg Bits" cell of every table (``caldera.paper_reference``) is recomputed from the
model shapes (``caldera.bits.MODEL_SHAPES``) with :func:`caldera.bits.average_bits` — the fine-tuned-factor
variant for rows with an ``ft_rank`` — and rounded half-up to the printed number of decimals. The ratio is
|computed − printed| / (half a unit of the printed last digit) (≤ 1: consistent with the rounding). The
library function is itself checked against an independent evaluation of the printed formula.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from caldera.bits import MODEL_SHAPES, average_bits
from caldera.paper_reference import list_reference_tables, load_reference_table
from theory.common import CheckResult

LABEL = "subapp:computation_of_per_parameter_bit_budget"


def paper_formula(shapes: list[tuple[int, int]], b_q: float, b_lr: float, k: int, r: int = 0) -> float:
    """The appendix formula, written out independently of :mod:`caldera.bits`."""
    num = sum(b_q * n * d + (k - r) * b_lr * (n + d) + 16 * r * (n + d) for n, d in shapes)
    return num / sum(n * d for n, d in shapes)


def round_like(value: float, printed: str) -> str:
    decimals = max(0, -Decimal(printed).as_tuple().exponent)
    return str(Decimal(repr(value)).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))


def table_rows() -> list[tuple[str, int, dict, dict]]:
    rows = []
    for name in list_reference_tables():
        for i, (raw, parsed) in enumerate(zip(load_reference_table(name, raw=True), load_reference_table(name))):
            if raw.get("avg_bits"):
                rows.append((name, i, raw, parsed))
    return rows


def recompute_row(parsed: dict, *, with_ft: bool = True) -> float:
    rank = parsed["rank"] or 0
    ft = (parsed.get("ft_rank") or 0) if with_ft else 0
    b_lr = parsed["b_lr"] if rank - ft > 0 else None
    return average_bits(MODEL_SHAPES[parsed["model"]], parsed["b_q"], b_lr, rank, ft_rank=ft)


#: (table, row) of printed cells known not to match the formula: the LQ-LoRA LLaMa-3 8B cell of the
#: fine-tuning
#: table prints 2.95 (the LLaMa-2 7B value); the LLaMa-3 shapes give 2.75 + 64·8·81920/218103808 = 2.942.
KNOWN_MISMATCHES = {("table5_finetune", 21)}


def check_tables(*, with_ft: bool = True, formula_offset: float = 0.0,
                 known: set[tuple[str, int]] = frozenset(KNOWN_MISMATCHES)) -> CheckResult:
    """Recompute every printed Avg Bits; ``formula_offset`` perturbs the formula (sensitivity tests).

    Holds when every mismatching cell is in ``known``; the ratio is the worst over the other cells.
    """
    rows = table_rows()
    mismatches, worst, lib_dev = [], 0.0, 0.0
    for name, i, raw, parsed in rows:
        value = recompute_row(parsed, with_ft=with_ft) + formula_offset
        rank = parsed["rank"] or 0
        ft = (parsed.get("ft_rank") or 0) if with_ft else 0
        indep = paper_formula(MODEL_SHAPES[parsed["model"]], parsed["b_q"], parsed["b_lr"] or 0, rank, ft)
        lib_dev = max(lib_dev, abs(indep + formula_offset - value))
        printed = raw["avg_bits"]
        half_unit = 0.5 * 10 ** Decimal(printed).as_tuple().exponent
        if (name, i) not in known:
            worst = max(worst, abs(value - float(printed)) / float(half_unit))
        if round_like(value, printed) != printed:
            mismatches.append({"table": name, "row": i, "model": parsed["model"],
                               "method": raw["method_printed"],
                               "rank": rank, "b_q": raw["b_q"], "b_lr": raw["b_lr"], "ft_rank": ft,
                               "printed": printed, "computed": round_like(value, printed), "exact": value})
    unexpected = [mm for mm in mismatches if (mm["table"], mm["row"]) not in known]
    holds = not unexpected and lib_dev < 1e-12
    variant = "with fine-tuned 16-bit factors (r = ft_rank)" if with_ft else "zero-shot formula for every row"
    return CheckResult(
        f"avg-bits[{'ft-variant' if with_ft else 'no-ft'}]", LABEL,
        f"printed Avg Bits = Σ(B_Q nd + (k − r)B_LR(n + d) + 16r(n + d))/Σ nd, {variant}", holds, worst, len(rows),
        counterexample={"mismatches": mismatches, "library_vs_formula": lib_dev} if mismatches else None,
        reasoning="The formula is a ratio of exact integers; the only disagreement is the LQ-LoRA LLaMa-3 "
                  "cell of the fine-tuning table, which repeats the LLaMa-2 value 2.95 although the LLaMa-3 "
                  "shapes give 2.942.",
        details={"rows": len(rows), "mismatches": mismatches, "library_vs_formula": lib_dev},
    )


def run(profile: object = None) -> list[CheckResult]:
    r = check_tables(with_ft=True)
    control = check_tables(with_ft=False)
    r.details["control_without_ft_variant"] = {"mismatching_rows": len(control.details["mismatches"])}
    return [r]
