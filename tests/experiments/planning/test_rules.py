"""caldera.experiments.planning.rules: the library's names of the workflow's rules are the rule files' names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from caldera.experiments.planning.rules import PINNED, STAGES, Rule

ROOT = Path(__file__).resolve().parents[3]


def _workflow_rules() -> set[str]:
    names = set()
    for smk in [ROOT / "Snakefile", *(ROOT / "workflow" / "rules").glob("*.smk")]:
        names |= set(re.findall(r"^(?:local)?rule (\w+):", smk.read_text(), flags=re.M))
    return names


def test_the_library_names_exactly_the_workflows_rules():
    """A rule renamed or added in a rule file, and not here, would drop out of the cost model and the pin."""
    assert {r.value for r in Rule} == _workflow_rules()


def test_every_rule_that_runs_a_job_has_a_stage():
    assert set(STAGES) == set(Rule) - {Rule.ALL}
    assert STAGES.get("evaluate") == "evaluation"  # looked up by the plain name a benchmark file gives


def test_the_pinned_rules_are_the_decompositions_and_the_hessians():
    assert {Rule.HESSIANS, Rule.COMPRESS_LAYERS, Rule.COMPRESS_VARIANT, Rule.SELECTION} <= PINNED
    assert "compress_variant" in PINNED and "evaluate" not in PINNED and "throughput" not in PINNED


def test_importing_the_rules_does_not_load_torch():
    """workflow/scripts/caldera_job.py reads them before the numerics pin, which must precede torch."""
    code = "import sys, caldera.experiments.planning.rules; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
