"""The Python API of whole models (caldera.api): the same files as the commands, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import caldera
from caldera import cli
from tests.helpers import tiny_hessians, tiny_llama, tiny_model_dir, word_tokenizer

#: a fast CALDERA config for the tiny model (the same on both sides of every comparison)
PARAMS = {"rank": 4, "outer_iters": 1, "inner_iters": 1}


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _hessian_files(folder: Path) -> dict[str, bytes]:
    """The Hessians and their summary (not the timing file, which records this run's seconds)."""
    return {k: v for k, v in _files(folder).items() if k.endswith(".safetensors") or k == "hessians.json"}


def test_hessians_and_compress_write_the_commands_files_byte_for_byte(tmp_path, monkeypatch):
    """`caldera hessians` + `caldera compress` against caldera.hessians + caldera.compress on the same model
    folder, calibration sampler, seed and parameters: every Hessian file and every checkpoint file is
    identical; without out= the returned model holds the checkpoint's tensors."""
    model_dir, h_cli = tiny_hessians(tmp_path, monkeypatch)  # the sampler stays replaced by seeded random ids
    h_api = caldera.hessians(str(model_dir), "lambada-books", out=tmp_path / "h_api", n_samples=4, seq_len=16)
    assert h_api == tmp_path / "h_api"
    cli_files = _hessian_files(h_cli)
    assert len(cli_files) == 3 and _hessian_files(h_api) == cli_files

    ck_cli, ck_api = tmp_path / "ck_cli", tmp_path / "ck_api"
    argv = ["compress", "--model", str(model_dir), "--hessians", str(h_cli), "--method", "caldera",
            *(x for k, v in PARAMS.items() for x in ("--param", f"{k}={v}")), "--out", str(ck_cli), "--quiet"]
    assert cli.main(argv) == 0
    assert caldera.compress(str(model_dir), h_api, "caldera", params=PARAMS, out=ck_api) == ck_api
    assert _files(ck_api) == _files(ck_cli)
    assert (tmp_path / "ck_api.layers").is_dir()  # the per-layer files beside it, as the command keeps them

    with pytest.raises(ValueError, match="already holds a caldera checkpoint; pass overwrite=True"):
        caldera.compress(str(model_dir), h_api, "caldera", params=PARAMS, out=ck_api)
    assert caldera.compress(str(model_dir), h_api, "caldera", params=PARAMS, out=ck_api, overwrite=True) == ck_api
    assert _files(ck_api) == _files(ck_cli)

    # the per-layer files of the run above (a fresh compression without out= runs in the module's example)
    model = caldera.compress(str(model_dir), h_api, "caldera", params=PARAMS, work_dir=tmp_path / "ck_api.layers")
    ref, _ = caldera.load_compressed(ck_cli)
    got, want = model.state_dict(), ref.state_dict()
    assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert type(model.model.layers[1].self_attn.q_proj).__name__ == "CompressedLinear"


def test_a_loaded_model_and_token_ids_give_the_commands_hessians(tmp_path, monkeypatch):
    """A model already in memory with the token ids the command sampled: the same Hessian tensors; the files
    record no sampler seed (the ids were given) and the model's own name."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    from caldera.pipeline.models import load_dense

    model_dir, h_cli = tiny_hessians(tmp_path, monkeypatch)
    model, _ = load_dense(str(model_dir))
    ids = torch.randint(3, 128, (4, 16), generator=torch.Generator().manual_seed(0))  # what tiny_hessians sampled
    h = caldera.hessians(model, ids, out=tmp_path / "h")
    for name in ("layer_000.safetensors", "layer_001.safetensors"):
        got, want = load_file(str(h / name)), load_file(str(h_cli / name))
        assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)
        with safe_open(str(h / name), "pt") as f:
            meta = json.loads(f.metadata()["caldera_hessians"])
        assert meta["seed"] is None and meta["model"] == model.config._name_or_path


def test_a_list_of_texts_is_sampled_with_the_seed(tmp_path):
    """Texts go through the calibration sampler (caldera.pipeline.text.sample_sequences) with the given seed."""
    from caldera.pipeline.hessians import calibration_fingerprint
    from caldera.pipeline.text import sample_sequences

    model_dir = tiny_model_dir(tmp_path / "tiny")
    docs = ["w3 w4 w5 w6", "w7 w8", "w9 w10 w11 w12 w13"]
    h = caldera.hessians(str(model_dir), docs, out=tmp_path / "h", n_samples=3, seq_len=8, seed=5)
    summary = json.loads((h / "hessians.json").read_text())
    want = sample_sequences(word_tokenizer(), docs, 3, 8, 5)
    assert summary["calibration_sha256"] == calibration_fingerprint(want)
    assert summary["calibration_sha256"] != calibration_fingerprint(sample_sequences(word_tokenizer(), docs, 3, 8, 6))
    assert summary["seed"] == 5 and summary["n_tokens"] == 24


def test_without_out_the_hessians_go_to_a_new_temporary_folder(tmp_path):
    import shutil

    ids = torch.randint(3, 128, (2, 8), generator=torch.Generator().manual_seed(0))
    h = caldera.hessians(tiny_llama(), ids)
    try:
        assert h.is_dir() and (h / "layer_001.safetensors").is_file() and h.name.startswith("caldera-hessians-")
    finally:
        shutil.rmtree(h)


# ----------------------------------------------------------------------------------------------- refusals

IDS = torch.randint(3, 128, (2, 8), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("data,error,match", [
    ("no-such-text", ValueError, r"data='no-such-text' is no calibration source; give one of \[.*'lambada-books'"),
    ("wiki-squad", ValueError, "data='wiki-squad' is evaluation text"),
    ([], ValueError, "data is an empty list"),
    (["a text", 3], TypeError, r"data: items \[1\] are not strings"),
    (3.5, TypeError, "data must be a calibration source's name, a list of texts or an"),
])
def test_hessians_refuses_bad_data_before_loading_the_model(data, error, match, monkeypatch):
    from caldera.pipeline import models

    monkeypatch.setattr(models, "load_dense", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(error, match=match):
        caldera.hessians("smollm2", data)


@pytest.mark.parametrize("kw,match", [
    ({"n_samples": 0}, "n_samples=0: expected an integer >= 1"),
    ({"seq_len": 1}, "seq_len=1: expected an integer >= 2"),
    ({"batch_size": True}, "batch_size=True: expected an integer >= 1"),
    ({"seed": -1}, r"seed=-1: expected an integer in \[0, "),
])
def test_hessians_refuses_bad_counts(kw, match):
    with pytest.raises(ValueError, match=match):
        caldera.hessians(tiny_llama(), IDS, **kw)


@pytest.mark.parametrize("ids,match", [
    (IDS.float(), r"data: a tensor of token ids must be \(N, T\) integers, got \(2, 8\) float32"),
    (IDS[0], r"must be \(N, T\) integers, got \(8,\) int64"),
    (IDS[:0], r"data: the tensor of token ids is empty \(\(0, 8\)\)"),
    (IDS + 200, r"data: token ids range over \[\d+, \d+\]; the model's vocabulary is \[0, 127\]"),
    (torch.zeros(1, 65, dtype=torch.long), "data has sequences of 65 tokens, above the model's "
                                            r"max_position_embeddings \(64\)"),
])
def test_hessians_refuses_bad_token_ids(ids, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        caldera.hessians(tiny_llama(), ids, out=tmp_path / "h")
    assert not (tmp_path / "h").exists()


def test_hessians_refuses_bad_models_and_text_without_a_tokenizer(tmp_path):
    with pytest.raises(TypeError, match="model must be a model name, a folder or a loaded transformers model"):
        caldera.hessians(3, IDS)
    with pytest.raises(ValueError, match=r"model='\./no/such/model': no such folder"):
        caldera.hessians("./no/such/model", IDS)
    with pytest.raises(ValueError, match="model: Linear has no decoder layers"):
        caldera.hessians(torch.nn.Linear(2, 2), IDS)
    with pytest.raises(ValueError, match="data is text but there is no tokenizer: pass tokenizer="):
        caldera.hessians(tiny_llama(), ["w3 w4"])
    with pytest.raises(ValueError, match="seq_len is 100 tokens, above the model's max_position_embeddings"):
        caldera.hessians(tiny_llama(), ["w3 w4"], tokenizer=word_tokenizer(), seq_len=100)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="out .*file already exists and is a file that is not a Hessians folder"):
        caldera.hessians(tiny_llama(), IDS, out=tmp_path / "file")


@pytest.mark.parametrize("kw,error,match", [
    ({"method": "no-such-method"}, ValueError, "unknown method 'no-such-method'; registered: "),
    ({"method": 3}, TypeError, "method must be a registered method's name"),
    ({"params": "rank=4"}, TypeError, "params must be a dict of the method's parameters, not str"),
    ({"params": {"rnak": 4}}, ValueError, r"unknown parameters \['rnak'\] \(did you mean 'rank'"),
    ({"preset": "no-such-preset"}, ValueError, "no-such-preset"),
    ({"params": {"rank": 4}, "ft_rank": 5}, ValueError, "ft_rank=5 is above the method's rank 4"),
    ({"ft_rank": -1}, ValueError, "ft_rank=-1: expected an integer >= 0"),
])
def test_compress_refuses_bad_methods_and_parameters_before_any_work(kw, error, match, tmp_path):
    with pytest.raises(error, match=match):
        caldera.compress(tiny_llama(), tmp_path, **kw)


def test_compress_refuses_missing_hessians_and_outputs_it_would_lose(tmp_path):
    with pytest.raises(ValueError, match=r"hessians='.*nope': no such folder; collect them with caldera.hessians"):
        caldera.compress(tiny_llama(), str(tmp_path / "nope"), params=PARAMS)
    h = tmp_path / "h"
    h.mkdir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="out .*file already exists and is a file that is not a caldera checkpoint"):
        caldera.compress(tiny_llama(), h, params=PARAMS, out=tmp_path / "file")
    with pytest.raises(ValueError, match="overlaps the hessians folder"):
        caldera.compress(tiny_llama(), h, params=PARAMS, out=h / "ckpt")
    assert (tmp_path / "file").read_text() == "x" and not (h / "ckpt").exists()


def test_compress_refuses_hessians_of_another_model(tmp_path, monkeypatch):
    """Hessians whose shapes are not those of the model: refused naming the file, before any layer is written."""
    _, h = tiny_hessians(tmp_path, monkeypatch)
    from transformers import LlamaConfig, LlamaForCausalLM

    other = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=128)).eval()
    with pytest.raises(ValueError, match="belong to another model"):
        caldera.compress(other, h, params=PARAMS, out=tmp_path / "ck")
    assert not (tmp_path / "ck").exists()
