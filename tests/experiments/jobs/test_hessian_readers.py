"""Every job that reads a model's calibration Hessians (compression, the selection sweep and its ablations, the
regime measurement, the Figure 3 and 4 traces) makes the same check before any work
(caldera.experiments.jobs.calibrate.check_job_hessians): a swapped file, another calibration's folder (its summary
and every file agreeing), a folder relabelled to another dtype, or another model's shapes are refused with the file
named, before a single Hessian is read."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from caldera.experiments.jobs import calibrate as C
from caldera.experiments.jobs import compress as CJ
from caldera.experiments.jobs import figures as F
from caldera.experiments.jobs import regime as RJ
from caldera.experiments.jobs import selection as S
from caldera.experiments.planning.plan import Variant
from caldera.experiments.planning.regime_plan import RegimePlan, paper_target
from caldera.experiments.planning.selection_plan import SelectionPlan
from caldera.experiments.planning.settings import (
    CalibrationSettings,
    FiguresSettings,
    RegimeSettings,
    RunContext,
    SelectionSettings,
)
from caldera.methods import get_method
from caldera.pipeline.hessian_files import layer_file
from caldera.pipeline.hessians import GROUPS
from tests.helpers import model_entry, tiny_model_dir
from tests.pipeline.hessian_helpers import rewrite, swap_layers, wrong_shape

CAL = {"source": "lambada-books", "n_samples": 3, "seq_len": 8, "seed": 5, "batch_size": 2}
FIGURES = {"model": "m", "layer": 1, "paper_model": "llama-2-7b", "paper_ranks": [8], "matrices": ["k_proj"],
           "ablations": ["4bit-factors"], "outer_iters": 1, "lplr_matrices": ["k_proj"], "lplr_inner_iters": 1}


def _fake_sequences(tok, n, seq_len, seed, source):
    return torch.randint(3, 128, (n, seq_len), generator=torch.Generator().manual_seed(seed))


def _run(src, seed: int = CAL["seed"]) -> RunContext:
    return RunContext(name="t", device="cpu", dtype="auto", layers_per_job=2,
                      models={"m": model_entry(src, shapes="llama-2-7b")},
                      stand_ins={"llama-2-7b": "m"}, calibration=CalibrationSettings.from_block({**CAL, "seed": seed}))


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """A saved tiny LLaMA with its tokenizer, its Hessians as the run's hessians job writes them (``h``) and those
    of another calibration seed (``other``)."""
    import caldera.pipeline.text as text

    root = tmp_path_factory.mktemp("readers")
    src = tiny_model_dir(root / "model")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(text, "calibration_sequences", _fake_sequences)
        mp.setattr(C, "_HASHES", {})
        C.step_hessians(_run(src), "m", str(root / "h"))
        C.step_hessians(_run(src, seed=9), "m", str(root / "other"))
    return src, root


def _relabel_dtype(d):
    """Every file's H stored as float16 under a float16 header, and the summary saying so: consistent, not this
    job's."""
    for li in range(2):
        rewrite(layer_file(d, li), lambda m: m.update(dtype="float16"),
                 lambda t: t.update({f"{g}.H": t[f"{g}.H"].half() for g in GROUPS}))
    summary = json.loads((d / "hessians.json").read_text())
    (d / "hessians.json").write_text(json.dumps({**summary, "dtype": "float16"}))


def _other_calibration(d):
    shutil.rmtree(d)
    shutil.copytree(d.parent / "other", d)


def _other_shapes(d):
    for li in range(2):
        rewrite(layer_file(d, li), None, wrong_shape)


_FILE = r"layer_00\d\.safetensors"
MUTATIONS = {
    "two layer files swapped": (swap_layers, _FILE + r" is not what its name and metadata say \(its metadata says "
                                                     r"it holds layer \d, its name says layer \d"),
    "another calibration, summary and files agreeing": (
        _other_calibration, _FILE + r" has calibration_sha256 '\w{16}' but this job says '\w{16}'"),
    "relabelled to float16 throughout": (_relabel_dtype, _FILE + r" has dtype 'float16' but this job says 'float32'"),
    "another model's shapes": (_other_shapes, _FILE + r": group 'qkv' H has shape \(96, 96\); layer \d's "
                                                      r"self_attn\.q_proj takes 64 inputs, so the expected shape is "
                                                      r"\(64, 64\)"),
}


def _selection_plan(run: RunContext) -> SelectionPlan:
    settings = SelectionSettings.from_block({"layers": {"m": [0, 1]}, "bits": 4, "iters": [1, 1],
                                             "base": {"preset": "paper"}, "candidates": {"a": {}}})
    return SelectionPlan(settings=settings, figures=FiguresSettings.from_block(FIGURES), run=run, models=["m"],
                         ranks={"m": {4: [8]}}, quip_params={}, run_params={4: {}})


def _regime_plan(run: RunContext) -> RegimePlan:
    settings = RegimeSettings.from_block({"models": {"m": {"paper_model": "llama-2-7b"}}, "q_bits": [2],
                                          "n_windows": 2})
    return RegimePlan(settings=settings, run=run, targets={"m": paper_target("llama-2-7b")}, quip_params={},
                      reconstructed=True)


def _variant() -> Variant:
    params = {"rank": 4, "outer_iters": 1, "inner_iters": 1}
    return Variant(id="v", model="m", method="caldera", params=params, config=get_method("caldera").make_config(params))


#: name: reader(run, hessian folder, scratch folder), each a job's entry point
READERS = {
    "compress_layers": lambda run, h, tmp: CJ.step_compress_layers(run, _variant(), str(h), 0,
                                                                   str(tmp / "layers" / "chunk.json")),
    "selection": lambda run, h, tmp: S.step_selection(_selection_plan(run), {"m": str(h)}, str(tmp / "s.json"),
                                                      str(tmp / "s.md")),
    "selection sweep": lambda run, h, tmp: S.sweep_model(_selection_plan(run), "m", str(h)),
    "selection ablations": lambda run, h, tmp: S.ablation_comparisons(
        run, FiguresSettings.from_block(FIGURES), {"update_order": "Q-first"}, str(h)),
    "figure 3 traces": lambda run, h, tmp: F.step_ablation_traces(run, "m", str(h), "all", str(tmp / "f3.json"),
                                                                  FiguresSettings.from_block(FIGURES)),
    "figure 4 traces": lambda run, h, tmp: F.step_lplr_traces(run, "m", str(h), str(tmp / "f4.json"),
                                                              FiguresSettings.from_block(FIGURES)),
    "regime": lambda run, h, tmp: RJ.step_regime(_regime_plan(run), {"m": str(h)}, str(tmp / "regime"),
                                                 str(tmp / "r.json"), str(tmp / "r.md"), log=lambda m: None),
}


class _Read(Exception):
    """Raised in place of reading a Hessian file: the reader got past its check."""


@pytest.fixture
def readers_env(collected, tmp_path, monkeypatch):
    """``(run, copy of the folder)``, with the calibration sequences of the fixture and every Hessian read
    replaced by :class:`_Read`."""
    import caldera.pipeline.compress as compress
    import caldera.pipeline.hessian_files as hessian_files
    import caldera.pipeline.text as text

    src, root = collected
    monkeypatch.setattr(text, "calibration_sequences", _fake_sequences)
    monkeypatch.setattr(C, "_HASHES", {})

    def read(path):
        raise _Read(str(path))

    monkeypatch.setattr(hessian_files, "load_layer_hessians", read)
    monkeypatch.setattr(compress, "load_layer_hessians", read)
    h = tmp_path / "h"
    shutil.copytree(root / "h", h)
    (tmp_path / "other").symlink_to(root / "other")
    return _run(src), h


@pytest.mark.parametrize("reader", list(READERS))
def test_the_run_s_own_hessians_pass_every_reader_s_check(readers_env, tmp_path, reader):
    run, h = readers_env
    with pytest.raises(_Read, match=r"layer_00\d\.safetensors"):
        READERS[reader](run, h, tmp_path)


@pytest.mark.parametrize("case", list(MUTATIONS))
@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_refuses_wrong_hessians_before_reading_one(readers_env, tmp_path, reader, case):
    """The refusal comes from the check, before any Hessian is read (a reader that skipped it would reach
    :class:`_Read`, or run on the wrong matrices) and before any output is written."""
    run, h = readers_env
    edit, msg = MUTATIONS[case]
    edit(h)
    with pytest.raises(ValueError, match=msg):
        READERS[reader](run, h, tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name not in ("h", "other")]
