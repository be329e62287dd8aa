"""The decision rules of the claims, by name: each turns a claim's measured comparisons into its verdict.

A claim's declaration (:mod:`caldera.experiments.report.claim_registry`) names its rule;
:mod:`caldera.experiments.report.claims` applies it. The rules:

* **counting** (deterministic numbers, Figures 3 / 4: one data-aware error per matrix×rank pair or curve), on the
  ``k`` of ``n`` comparisons that satisfy the claim's relation: ``"all"`` holds when every one does, ``"some"``
  when at least one does, ``"most"`` when more than half do; otherwise (and with none) **fails**.
* **direction** (95 % intervals), on each interval's direction (+1: it lies above no-difference, −1: below, 0: it
  contains it): ``"lower"`` (A below B) holds when every direction is −1 and fails when any is +1; ``"higher"`` is
  its mirror; otherwise (and with none) **inconclusive**.
* ``"recovers"`` (Table 5's LoRA claim): :func:`recovery_verdict` on two sets of directions.
* ``"given"``: decided by the job that wrote the entry (its verdict comes with it).

:data:`RELATIONS`: the relations of Figure 3's comparisons, by name, each a predicate on (final error of run a,
final error of run b). This module imports nothing of :mod:`caldera`.
"""

from __future__ import annotations

from typing import Callable

#: the verdict of a claim whose comparisons this run does not make
NOT_MEASURED = "not measured in this run"

COUNT_RULES = ("all", "some", "most")
DIRECTION_RULES = ("lower", "higher")
RULES = (*COUNT_RULES, *DIRECTION_RULES, "recovers", "given")


def count_verdict(rule: str, k: int, n: int) -> str:
    """The verdict of a claim that ``k`` of its ``n`` deterministic comparisons satisfy, by counting rule ``rule``
    ("all", "some" or "most"): **holds** or **fails**; with no comparison (the run has neither side of any pair)
    :data:`NOT_MEASURED`."""
    if rule not in COUNT_RULES:
        raise ValueError(f"counting rule {rule!r}: give one of {COUNT_RULES}")
    if n == 0:
        return NOT_MEASURED
    return "holds" if {"all": k == n, "some": k > 0, "most": k > n / 2}[rule] else "fails"


def direction_verdict(rule: str, directions: list[int]) -> str:
    """The verdict of "A is lower than B" (``rule`` "lower") or "A is higher than B" ("higher") from the directions
    of its intervals (+1 above no-difference, −1 below, 0 containing it): **holds** when every direction is the
    claimed one, **fails** when any is the opposite, **inconclusive** otherwise (or with none)."""
    if rule not in DIRECTION_RULES:
        raise ValueError(f"direction rule {rule!r}: give one of {DIRECTION_RULES}")
    claimed = -1 if rule == "lower" else 1
    if directions and all(d == claimed for d in directions):
        return "holds"
    if any(d == -claimed for d in directions):
        return "fails"
    return "inconclusive"


def recovery_verdict(gains_vs_compressed: list[int], gains_vs_dense: list[int]) -> str:
    """Table 5's claim from per-(row, task) directions (+1: the fine-tuned model is better with its paired 95 %
    interval excluding no-difference, −1: worse likewise, 0: unresolved): **holds** when every comparison with
    the un-fine-tuned compressed model is +1 and none with the dense model is −1; **fails** when any comparison
    with either is −1; **inconclusive** otherwise (or with no comparisons)."""
    if not gains_vs_compressed:
        return "inconclusive"
    if any(g < 0 for g in gains_vs_compressed) or any(g < 0 for g in gains_vs_dense):
        return "fails"
    return "holds" if all(g > 0 for g in gains_vs_compressed) else "inconclusive"


def _below(x: float, y: float) -> bool:
    return x < y


def _slightly_above(x: float, y: float) -> bool:
    return y <= x <= 1.1 * y


def _much_above(x: float, y: float) -> bool:
    return x > 1.25 * y


def _above(x: float, y: float) -> bool:
    return x > y


#: Figure 3's relations of two runs' final errors (x: run a's, y: run b's), by name
RELATIONS: dict[str, Callable[[float, float], bool]] = {
    "a < b": _below,
    "b ≤ a ≤ 1.1 b": _slightly_above,
    "a > 1.25 b": _much_above,
    "a > b": _above,
}
