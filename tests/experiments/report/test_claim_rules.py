"""The decision rules by name (caldera.experiments.report.claim_rules): counting, direction and Table 5's recovery
rule, and each Figure 3 relation at the threshold its claim states."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from caldera.experiments.report import claim_rules as C

ROOT = Path(__file__).resolve().parents[3]


def test_counting_rules_read_their_quantifier():
    assert [C.count_verdict("all", k, 3) for k in (0, 2, 3)] == ["fails", "fails", "holds"]
    assert [C.count_verdict("some", k, 3) for k in (0, 1, 3)] == ["fails", "holds", "holds"]
    assert [C.count_verdict("most", k, 4) for k in (1, 2, 3)] == ["fails", "fails", "holds"]  # 2 of 4 is no majority
    # no comparison at all: the run did not measure the claim (never "fails" on nothing)
    assert {C.count_verdict(rule, 0, 0) for rule in C.COUNT_RULES} == {C.NOT_MEASURED}
    with pytest.raises(ValueError, match="'lower'"):
        C.count_verdict("lower", 1, 2)


def test_direction_rules_hold_on_every_claimed_direction_and_fail_on_any_opposite():
    assert C.direction_verdict("lower", [-1, -1]) == "holds"
    assert C.direction_verdict("lower", [-1, 0]) == "inconclusive"
    assert C.direction_verdict("lower", [-1, 0, 1]) == "fails"
    assert C.direction_verdict("higher", [1, 1]) == "holds"
    assert C.direction_verdict("higher", [1, -1]) == "fails"
    assert C.direction_verdict("higher", [-1, -1]) == "fails" and C.direction_verdict("lower", [1]) == "fails"
    assert C.direction_verdict("lower", []) == C.direction_verdict("higher", []) == "inconclusive"
    with pytest.raises(ValueError, match="'all'"):
        C.direction_verdict("all", [1])


def test_recovery_verdict_rules():
    assert C.recovery_verdict([1, 1], [0, 1]) == "holds"
    assert C.recovery_verdict([1, 0], [0, 0]) == "inconclusive"
    assert C.recovery_verdict([1, 1], [-1, 0]) == "fails"
    assert C.recovery_verdict([-1, 1], [0, 0]) == "fails"
    assert C.recovery_verdict([], []) == "inconclusive"


#: (run a's final error, run b's) → whether the relation holds, at the threshold the claim's text states
STATED = {
    "a < b": {(0.9, 1.0): True, (1.0, 1.0): False, (1.2, 1.0): False},
    "b ≤ a ≤ 1.1 b": {(1.0, 1.0): True, (1.05, 1.0): True, (1.1, 1.0): True, (1.11, 1.0): False,
                      (0.99, 1.0): False},
    "a > 1.25 b": {(1.25, 1.0): False, (1.26, 1.0): True, (0.5, 1.0): False},
    "a > b": {(1.0, 1.0): False, (1.01, 1.0): True, (0.9, 1.0): False},
}


def test_each_relation_decides_at_its_threshold():
    assert set(C.RELATIONS) == set(STATED)
    for name, cases in STATED.items():
        assert {xy: C.RELATIONS[name](*xy) for xy in cases} == cases, name


def test_the_module_imports_nothing_of_caldera():
    tree = ast.parse((ROOT / "caldera/experiments/report/claim_rules.py").read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m and m.split(".")[0] == "caldera"]
