"""The README quotes the committed outputs: its result table and verdict counts are generated from them, and this
test fails when a committed table or claims file changes under the README."""

import copy
import json
from pathlib import Path

import pytest

from caldera.experiments.report import readme_numbers as R

ROOT = Path(__file__).resolve().parents[3]


def test_the_readme_quotes_the_committed_outputs():
    missing = R.check((ROOT / "README.md").read_text(), ROOT)
    assert not missing, ("README.md no longer matches the committed outputs; paste what "
                         "`python -m caldera.experiments.report.readme_numbers` prints:\n" + "\n".join(missing))


def test_a_changed_committed_table_is_caught(tmp_path):
    for run in R.COUNTED_RUNS:
        (tmp_path / "paper_tables" / run).mkdir(parents=True)
        for name in ("claims.json", "timings.json"):
            (tmp_path / "paper_tables" / run / name).write_text((ROOT / "paper_tables" / run / name).read_text())
    tab = json.loads((ROOT / "paper_tables/generated" / f"{R.RESULT_TABLE}.json").read_text())
    (tmp_path / "paper_tables/generated" / f"{R.RESULT_TABLE}.json").write_text(json.dumps(tab))
    regime = (ROOT / "paper_tables/generated/regime.json").read_text()
    (tmp_path / "paper_tables/generated/regime.json").write_text(regime)
    (tmp_path / "paper_tables/regime").mkdir()
    agreement = json.loads((ROOT / "paper_tables/regime/regime_agreement.json").read_text())
    (tmp_path / "paper_tables/regime/regime_agreement.json").write_text(json.dumps(agreement))
    readme = (ROOT / "README.md").read_text()
    assert R.check(readme, tmp_path) == []
    # a regime record whose choice moves is caught
    moved_regime = json.loads(regime)
    sel = next(iter(moved_regime["models"].values()))
    sel["q_bits"] = int(sel["margin"]["runner_up"])
    sel["margin"]["runner_up"] = int(next(b for b in sel["candidates"] if int(b) != sel["q_bits"]))
    (tmp_path / "paper_tables/generated/regime.json").write_text(json.dumps(moved_regime))
    assert [m.split(":")[0] for m in R.check(readme, tmp_path)] == ["stand-ins' regime"]
    (tmp_path / "paper_tables/generated/regime.json").write_text(regime)
    # ... and so is an agreement page whose count of differing claims moves
    agreement["differ"] = agreement["differ"][1:]
    (tmp_path / "paper_tables/regime/regime_agreement.json").write_text(json.dumps(agreement))
    assert [m.split(":")[0] for m in R.check(readme, tmp_path)] == ["regime agreement"]
    (tmp_path / "paper_tables/regime/regime_agreement.json").write_text(
        (ROOT / "paper_tables/regime/regime_agreement.json").read_text())
    moved = copy.deepcopy(tab)
    row = next(r for r in moved["rows"] if r["variant"] == "smollm2-quipsharp")
    row["ours"]["wiki2_ppl"] += 0.01  # one step of the quoted two decimals: a new run's number
    (tmp_path / "paper_tables/generated" / f"{R.RESULT_TABLE}.json").write_text(json.dumps(moved))
    assert [m.split(":")[0] for m in R.check(readme, tmp_path)] == ["result table"]


def test_a_changed_verdict_is_caught_and_grouped_claims_count_once():
    claims = [{"claim": "c", "source": f"t [{pm}]", "verdict": "holds", "intervals": [
        {"kind": "ppl ratio", "pair": [f"smollm2-a{i}", "smollm2-q"], "estimate": 0.9, "lo": 0.8, "hi": 0.95}]}
        for i, pm in enumerate(("7b", "13b", "70b"))]
    assert R.counts_text(claims) == "3 claims (1 distinct): 3 hold"
    claims[0]["verdict"] = "inconclusive"
    assert R.counts_text(claims) == "3 claims (1 distinct): 2 hold, 1 inconclusive"


def test_a_table_without_the_quoted_row_says_which():
    tab = {"rows": []}
    with pytest.raises(ValueError, match="0 rows of llama-2-7b Unquantized rank 0"):
        R.result_table(tab)


def test_job_time_texts():
    assert R.job_time_text({"n_jobs": 87, "job_s": 6135.8}, "min") == "87 jobs, 102.3 job-min"
    assert R.job_time_text({"n_jobs": 193, "job_s": 24753.2}, "hours") == "193 jobs and 6.9 job-hours"
