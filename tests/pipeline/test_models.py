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
