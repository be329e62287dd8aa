"""benchmarks/reliability_probe.py: how a case's outcomes become a verdict, and a few of its cases run for real
(an out-of-range option, a file at ``compress --out``, a truncated checksums file)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import reliability_probe as P  # noqa: E402

Outcome, Result = P.Outcome, P.Result
MODEL = ("model.safetensors",)


def _loaded(who, logits):
    return Outcome(who, False, logits=logits)


def _refused(who, exc_type, message):
    return Outcome(who, True, exc_type=exc_type, message=message)


def test_a_raw_exception_that_names_no_file_is_a_problem_and_one_that_names_it_a_clear_refusal():
    raw = Result([_refused("load_compressed", "SafetensorError", "Error while deserializing header: incomplete "
                           "metadata, file not fully covered")])
    assert P.classify(raw, MODEL) == P.PROBLEM
    named = Result([_refused("load_compressed", "ValueError", "checkpoint file /x/model.safetensors cannot be read")])
    assert P.classify(named, MODEL) == P.REFUSED
    cli = Result([Outcome("caldera", True, code=2, message="usage: caldera eval\ncaldera eval ppl: error: argument "
                          "--max-windows: -1 is out of range")])
    assert P.classify(cli, ("--max-windows",)) == P.REFUSED
    assert P.classify(cli, ("--seq-len",)) == P.PROBLEM


def test_loaders_that_word_the_same_refusal_differently_are_a_problem_where_the_case_asks_for_one_message():
    res = Result([_refused("load_compressed", "ValueError", "tied: lm_head.weight -> model.norm.weight"),
                  _refused("from_pretrained", "ValueError", "tied map is wrong")])
    assert P.classify(res, ("tied",)) == P.REFUSED
    assert P.classify(res, ("tied",), same_message=True) == P.PROBLEM


def test_an_acceptance_is_correct_only_when_its_check_holds():
    x = torch.ones(2, 3)
    assert P.classify(Result([_loaded("load_compressed", x)], accepted_right=True), MODEL) == P.CORRECT
    assert P.classify(Result([_loaded("load_compressed", x)], accepted_right=False), MODEL) == P.PROBLEM
    assert P.classify(Result([Outcome("caldera", False, code=0)]), ("--threads",)) == P.PROBLEM  # no check: wrong


def test_a_clear_refusal_that_changed_the_target_is_a_problem():
    res = Result([Outcome("caldera", True, code=2, message="error: --out X is not a checkpoint")], intact=False)
    assert P.classify(res, ("--out",)) == P.PROBLEM
    res.intact = True
    assert P.classify(res, ("--out",)) == P.REFUSED


def test_a_loader_that_does_not_read_the_damaged_file_may_load_it_with_the_intact_logits():
    refusal = _refused("load_compressed", "ValueError", "/x/tokenizer.json is not valid JSON")
    ref = torch.arange(6.0).reshape(2, 3)
    right, note = P.same_logits([refusal, _loaded("from_pretrained", ref.clone())], ref)
    assert right and "equal to the intact" in note
    res = Result([refusal, _loaded("from_pretrained", ref)], accepted_right=right, may_accept=("from_pretrained",))
    assert P.classify(res, ("tokenizer.json",)) == P.REFUSED
    wrong, note = P.same_logits([refusal, _loaded("from_pretrained", ref + 1)], ref)
    assert not wrong and "NOT equal" in note
    res = Result([refusal, _loaded("from_pretrained", ref + 1)], accepted_right=wrong, may_accept=("from_pretrained",))
    assert P.classify(res, ("tokenizer.json",)) == P.PROBLEM
    res = Result([refusal, _loaded("from_pretrained", ref)], accepted_right=True)  # not a loader that may load it
    assert P.classify(res, ("tokenizer.json",)) == P.PROBLEM


def test_the_first_line_is_the_error_line_with_the_scratch_folder_hidden_and_shortened():
    text = "usage: caldera compress ...\ncaldera compress: error: --out /tmp/r/x already exists " + "y" * 300
    line = P.first_line(text, "/tmp/r")
    assert line.startswith("caldera compress: error: --out <tmp>/x already exists") and len(line) == P.LINE_CHARS
    assert P.first_line("ValueError text\nmore", None) == "ValueError text"


def test_every_class_has_cases_and_every_case_is_named_once():
    cases = P.cases()
    assert len({(c.cls, c.case) for c in cases}) == len(cases)
    assert {c.cls[0] for c in cases} == set("123456")


def _case(text):
    return next(c for c in P.cases() if c.case == text)


@pytest.mark.parametrize("text, option", [("eval ppl --max-windows -1", "--max-windows"),
                                          ("matrix-report --quick --rank 0", "--rank")])
def test_an_out_of_range_option_is_refused_clearly(tmp_path, text, option):
    env = P.Env(tmp_path, base=tmp_path / "no-such-checkpoint")  # refused by the parser, before the model is read
    row = P.run_case(_case(text), env)
    assert row["verdict"] == P.REFUSED, row
    assert row["happened"].startswith("caldera: exit 2:") and option in row["happened"]


def test_a_file_at_compress_out_is_refused_and_kept(tmp_path):
    from tests.helpers import tiny_model_dir

    model = tiny_model_dir(tmp_path / "tiny")
    hess = tmp_path / "hess"  # compress refuses the output before it reads any Hessian
    hess.mkdir()
    (hess / "hessians.json").write_text(json.dumps({"model": str(model)}))
    env = P.Env(tmp_path, model=model, hessians=hess)
    row = P.run_case(_case("X = an existing file"), env)
    assert row["verdict"] == P.REFUSED, row
    assert row["happened"].endswith("notes.txt unchanged") and "--out <tmp>/cases/file/notes.txt" in row["happened"]
    assert (tmp_path / "cases" / "file" / "notes.txt").read_text() == "keep me\n"


def test_a_truncated_checksums_file_is_refused_by_both_loaders_naming_it(tmp_path):
    from caldera import load_compressed
    from tests.pipeline.checkpoint_helpers import save_tiny_checkpoint

    base = save_tiny_checkpoint(tmp_path / "ck")[1]
    env = P.Env(tmp_path, base=base)
    env.reference["base"] = P.logits_of(load_compressed(base, load_tokenizer=False)[0])
    row = P.run_case(_case("checksums.json truncated to half"), env)
    assert row["verdict"] == P.REFUSED, row
    assert [o["who"] for o in row["outcomes"]] == list(P.LOADERS)
    assert all(o["refused"] and "checksums.json" in o["message"] for o in row["outcomes"])


def test_the_record_counts_every_row_and_marks_problems():
    rows = [{"class": "1 x", "case": "a|b", "happened": "h", "verdict": P.PROBLEM},
            {"class": "2 y", "case": "c", "happened": "h", "verdict": P.CORRECT}]
    record = {"commit": "abc", "date": "d", "seconds": 1.0, "torch": "t", "transformers": "t", "rows": rows,
              "counts": P.counts(rows)}
    md = P.to_markdown(record)
    assert "2 cases: 0 refused clearly, 1 correct, 1 PROBLEM." in md
    assert "| 1 x | a\\|b | h | **PROBLEM** |" in md and "| 2 y | c | h | correct |" in md
