"""The claims shared by the run's checks and the selection (caldera.experiments.report.claim_registry): each
Figure 3 comparison's predicate against the threshold its claim states, its runs and the module's imports."""

from __future__ import annotations

import ast
from pathlib import Path

from caldera.config import PRESETS
from caldera.experiments.report import claim_registry as D
from caldera.experiments.report import claims

ROOT = Path(__file__).resolve().parents[3]

#: (final error of run a, final error of run b) → whether the claim's text says it holds on that pair
STATED = {
    "16-bit CALDERA below QuIP# (+LR) in data-aware error": {(0.9, 1.0): True, (1.0, 1.0): False, (1.2, 1.0): False},
    "4-bit factors slightly above 16-bit (≤ 10% higher)": {(1.0, 1.0): True, (1.05, 1.0): True, (1.1, 1.0): True,
                                                           (1.11, 1.0): False, (0.99, 1.0): False},
    "no-LDLQ much worse (> 1.25× the 4-bit error)": {(1.25, 1.0): False, (1.26, 1.0): True, (0.5, 1.0): False},
    "no-RHT worse for some matrices": {(1.0, 1.0): False, (1.01, 1.0): True, (0.9, 1.0): False},
}


def test_each_predicate_decides_its_claim_at_the_stated_threshold():
    assert [c[0] for c in D.ABLATION_CLAIMS] == list(STATED)
    for claim, _, _, pred, _ in D.ABLATION_CLAIMS:
        got = {xy: bool(pred(*xy)) for xy in STATED[claim]}
        assert got == STATED[claim], claim


def test_the_runs_are_ablation_presets_or_quip_lr_and_the_quantifier_is_the_claims():
    for claim, a, b, _, need in D.ABLATION_CLAIMS:
        assert a != b and {a, b} <= set(PRESETS) | {"quip#-lr"}, claim
        assert need == ("some" if "some" in claim else "all"), claim
    names = [c[0] for c in D.ABLATION_CLAIMS] + [D.LPLR_CLAIM]
    assert len(set(names)) == len(names)


def test_the_module_imports_nothing_of_caldera_and_claims_reexports_the_same_objects():
    """Both deciders import the definitions from here, so neither imports the other for them."""
    tree = ast.parse((ROOT / "caldera/experiments/report/claim_registry.py").read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m and m.split(".")[0] == "caldera"]
    assert claims.ABLATION_CLAIMS is D.ABLATION_CLAIMS and claims.LPLR_CLAIM is D.LPLR_CLAIM


def test_pairs_verdict_reads_the_quantifier():
    assert [D.pairs_verdict(k, 3, "all") for k in (0, 2, 3)] == ["fails", "fails", "holds"]
    assert [D.pairs_verdict(k, 3, "some") for k in (0, 1, 3)] == ["fails", "holds", "holds"]
    assert D.pairs_verdict(0, 0, "some") == D.pairs_verdict(0, 0, "all") == "fails"
    import pytest

    with pytest.raises(ValueError, match="'most'"):
        D.pairs_verdict(1, 2, "most")
