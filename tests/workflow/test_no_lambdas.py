"""No rule of the workflow holds a `lambda`; its helpers are named functions in workflow/rules/common.smk."""

from __future__ import annotations

import io
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMK = sorted((ROOT / "workflow").rglob("*.smk")) + [ROOT / "Snakefile"]


def lambdas_in_rules(text: str) -> list[int]:
    """The lines of the `lambda` keywords inside a rule or checkpoint of Snakemake source ``text`` (a token scan:
    comments and strings do not count; a rule's body is every line indented under its `rule name:` header)."""
    found, in_rule = [], False
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NAME and tok.start[1] == 0:  # a top-level statement starts or ends a rule
            in_rule = tok.string in ("rule", "checkpoint", "localrule")
        elif tok.type == tokenize.NAME and tok.string == "lambda" and in_rule:
            found.append(tok.start[0])
    return found


@pytest.mark.parametrize("path", SMK, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_lambda_in_rules(path):
    assert lambdas_in_rules(path.read_text()) == [], f"{path}: a lambda in a rule; name it in common.smk"


def test_the_scan_finds_a_rule_lambda():
    text = 'x = lambda w: 1  # lambda\n\n\nrule a:\n    params:\n        v=lambda w: VARIANTS[w.variant],\n'
    text += '        s="lambda",\n\n\nrule b:\n    input:\n        f,\n'
    assert lambdas_in_rules(text) == [6]


def test_the_scan_flags_the_old_lora_rules():
    """A rule file with lambdas (as loraft.smk once had four) is found."""
    old = subprocess.run(["git", "show", "84a42d4:workflow/rules/loraft.smk"], cwd=ROOT, capture_output=True, text=True)
    if old.returncode != 0:
        pytest.skip("commit 84a42d4 not in this checkout")
    assert len(lambdas_in_rules(old.stdout)) == 4
