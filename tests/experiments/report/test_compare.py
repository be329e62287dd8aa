"""A run against a record: a verdict change or an estimate beyond the record's interval is named; a difference
inside its interval is not; rows only one side has are listed, not flagged."""

import json
import shutil
from pathlib import Path

import pytest

from caldera.experiments.report import compare as C

ROOT = Path(__file__).resolve().parents[3]


def iv(est, lo, hi, pair=("a", "b"), kind="ppl ratio", **kw):
    return {"kind": kind, "pair": list(pair), "estimate": est, "lo": lo, "hi": hi, **kw}


def claims(*entries):
    return [{"claim": c, "source": s, "verdict": v, "numbers": "", "intervals": ivs} for c, s, v, ivs in entries]


def table(name, rows):
    return {"table": name, "columns": ["avg_bits", "wiki2_ppl", "c4_ppl", "wino_acc"], "rows": rows}


def trow(variant, ppl, ci, c4=None, c4ci=None, pm="llama-2-7b"):
    ours, ci_ = {"wiki2_ppl": ppl, "wino_acc": 50.0}, {"wiki2_ppl": ci}
    if c4 is not None:
        ours["c4_ppl"], ci_["c4_ppl"] = c4, c4ci
    return {"variant": variant, "paper_model": pm, "ours": ours, "ours_ci": ci_}


def test_an_estimate_inside_the_reference_interval_is_not_flagged():
    ref = claims(("x", "T1", "holds", [iv(0.80, 0.70, 0.95)]))
    run = claims(("x", "T1", "holds", [iv(0.93, 0.85, 1.02)]))  # another number, still inside [0.70, 0.95]
    res = C.compare_claim_sets(run, ref)
    assert res["beyond"] == [] and res["changed"] == []
    assert res["intervals"][0]["beyond"] is False and res["intervals"][0]["judged"] == ["95 % CI", 0.70, 0.95]


def test_an_estimate_outside_is_flagged_and_a_verdict_change_named():
    ref = claims(("x", "T1", "holds", [iv(0.80, 0.70, 0.95)]))
    run = claims(("x", "T1", "inconclusive", [iv(0.97, 0.85, 1.10)]))
    res = C.compare_claim_sets(run, ref)
    assert [x["estimate"] for x in res["beyond"]] == [0.97]
    assert res["changed"][0]["committed"] == "holds" and res["changed"][0]["rerun"] == "inconclusive"
    assert res["flips"] == []
    lines = C.summary_lines({"run": "r", "against": "a", "claims": res,
                             "tables": C.compare_table_rows({}, {})})
    assert any("verdict  x [T1]: holds -> inconclusive" in ln for ln in lines)
    assert any("0.970 outside the reference 95 % CI [0.700, 0.950]" in ln for ln in lines)


def test_the_rerun_prediction_interval_judges_where_the_record_has_one():
    ref = claims(("x", "T1", "holds", [iv(0.80, 0.70, 0.90, rerun_lo=0.65, rerun_hi=0.97)]))
    run = claims(("x", "T1", "holds", [iv(0.95, 0.85, 0.99)]))  # outside the CI, inside the prediction interval
    res = C.compare_claim_sets(run, ref)
    assert res["beyond"] == [] and res["intervals"][0]["judged"][0] == "rerun prediction"


def test_an_unbounded_reference_interval_judges_nothing():
    ref = claims(("x", "T1", "holds", [iv(0.80, None, None)]))
    res = C.compare_claim_sets(claims(("x", "T1", "holds", [iv(5.0, 4.0, 6.0)])), ref)
    assert res["intervals"][0]["beyond"] is None and res["beyond"] == []


def test_table_rows_each_ppl_column_against_the_reference_interval():
    ref = {"t1": table("t1", [trow("v1", 120.0, [110.0, 130.0], c4=140.0, c4ci=[50.0, 400.0]),
                              trow("v1", 120.0, [110.0, 130.0], pm="llama-2-13b"),
                              trow("gone", 100.0, [90.0, 110.0])])}
    run = {"t1": table("t1", [trow("v1", 129.0, [118.0, 140.0], c4=390.0, c4ci=[100.0, 900.0]),
                              trow("new-method", 131.0, [120.0, 142.0])]),
           "t9": table("t9", [])}
    res = C.compare_table_rows(run, ref)
    assert [(r["variant"], r["column"], r["beyond"]) for r in res["rows"]] == [("v1", "wiki2_ppl", False),
                                                                               ("v1", "c4_ppl", False)]
    assert res["only_run"] == [{"table": "t1", "variant": "new-method"}, {"table": "t9"}]
    assert res["only_ref"] == [{"table": "t1", "variant": "gone"}]
    run["t1"]["rows"][0]["ours"]["wiki2_ppl"] = 131.0
    assert [r["column"] for r in C.compare_table_rows(run, ref)["beyond"]] == ["wiki2_ppl"]


def test_the_committed_record_against_itself_has_no_difference(tmp_path):
    rec = ROOT / "paper_tables/generated"
    res = C.compare_folders(rec, rec)
    assert not C.differs(res)
    assert res["claims"]["intervals"] and res["tables"]["rows"]
    assert C.summary_lines(res)[-1] == "no difference beyond the intervals"


def test_a_results_folder_is_taken_through_its_tables(tmp_path):
    (tmp_path / "tables").mkdir()
    shutil.copy(ROOT / "paper_tables/generated/claims.json", tmp_path / "tables/claims.json")
    assert C.load_tables_folder(tmp_path)["folder"] == str(tmp_path / "tables")


def test_missing_and_empty_folders_say_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        C.load_tables_folder(tmp_path / "nope")
    with pytest.raises(ValueError, match="neither claims.json nor a table JSON"):
        C.load_tables_folder(tmp_path)
    (tmp_path / "claims.json").write_text("{")
    with pytest.raises(ValueError, match="claims.json: not JSON"):
        C.load_tables_folder(tmp_path)


def test_a_json_that_is_no_table_is_ignored(tmp_path):
    (tmp_path / "timings.json").write_text(json.dumps({"stages": {}}))
    (tmp_path / "t.json").write_text(json.dumps(table("t", [])))
    assert list(C.load_tables_folder(tmp_path)["tables"]) == ["t"]
