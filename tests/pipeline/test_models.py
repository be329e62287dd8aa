"""caldera.pipeline.models: model sources, the run's device and dtype, and loading a model's parts."""

from __future__ import annotations

import pytest
import torch

from caldera.pipeline import models


def test_a_source_is_a_folder_or_hub_id_and_an_unknown_asset_names_its_setting():
    assert models.resolve_source("org/name") == "org/name"
    assert models.resolve_source("/some/folder") == "/some/folder"
    known = r"known: \['gemma3', 'smollm2'\]"
    with pytest.raises(ValueError, match=r"models\.m\.source 'asset:nope': unknown asset; " + known):
        models.resolve_source("asset:nope", "models.m.source")


@pytest.mark.parametrize("name", ["meta-llama/Llama-2-7b-hf", "gpt2"])
def test_hub_ids_still_go_to_the_hub(name):
    from caldera.pipeline.sources import looks_like_path

    assert not looks_like_path(name) and models.resolve_model(name) == name


def test_a_named_model_is_an_asset_a_folder_or_a_hub_id_and_never_a_typo(tmp_path, monkeypatch):
    from caldera.pipeline import assets

    monkeypatch.setenv("CALDERA_CACHE", str(tmp_path / "cache"))
    with pytest.raises(models.AssetNotBuilt) as e:  # not built, and resolving it builds nothing
        models.resolve_model("smollm2")
    assert e.value.filename == str(assets.asset_dir("smollm2")) and not (tmp_path / "cache").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        models.resolve_model(str(tmp_path / "file"))
    with pytest.raises(FileNotFoundError) as e:
        models.resolve_model(str(tmp_path / "nosuch"))
    assert e.value.filename == str(tmp_path / "nosuch") and not isinstance(e.value, models.AssetNotBuilt)
    assert models.resolve_model(str(tmp_path)) == str(tmp_path)
    assert not models.is_checkpoint(tmp_path)
    (tmp_path / "caldera_config.json").write_text("{}")
    assert models.is_checkpoint(tmp_path) and models.is_checkpoint(str(tmp_path))


def test_device_and_dtype():
    assert models.resolve_device("cpu").type == "cpu"
    assert models.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="config device: cuda, but torch sees no CUDA device; set device: auto"):
            models.resolve_device("cuda")
    assert models.dense_dtype("auto", "cpu") is torch.float32
    assert models.dense_dtype("auto", "cuda") == "auto"  # the checkpoint's own dtype on an accelerator
    assert models.dense_dtype("bfloat16", "cpu") is torch.bfloat16


def test_load_dense_seeds_the_rng_and_load_layers_reads_only_those_layers(tmp_path):
    from tests.helpers import tiny_llama, word_tokenizer

    src = tmp_path / "m"
    tiny_llama(0).save_pretrained(src)
    word_tokenizer().save_pretrained(src)
    torch.manual_seed(123)
    model, tok = models.load_dense(str(src))
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))  # seeded with 0, loading drew nothing
    assert next(model.parameters()).dtype is torch.float32 and tok is not None
    part = models.load_layers(str(src), [1])
    layers = part.model.layers
    assert layers[1].self_attn.q_proj.weight.device.type == "cpu"
    assert layers[0].self_attn.q_proj.weight.device.type == "meta"
    assert torch.equal(layers[1].mlp.down_proj.weight, model.model.layers[1].mlp.down_proj.weight)
    assert type(models.load_tokenizer(str(src))) is type(tok)
    dense, _, kind = models.load_any(str(src))  # not a checkpoint: the dense model
    assert kind == "dense" and torch.equal(dense.model.layers[1].mlp.down_proj.weight,
                                           model.model.layers[1].mlp.down_proj.weight)


def test_load_any_loads_a_checkpoint_as_stored(tmp_path):
    from caldera.nn.compressed_linear import CompressedLinear
    from tests.pipeline.checkpoint_helpers import save_tiny_checkpoint

    _, path = save_tiny_checkpoint(tmp_path / "ckpt")
    assert models.is_checkpoint(path)
    model, tok, kind = models.load_any(str(path))
    assert kind == "compressed" and tok is not None
    assert any(isinstance(m, CompressedLinear) for m in model.modules())
