"""caldera.pipeline.checkpoint.convert: a format-1 checkpoint (no config.json, no content manifest) is refused by
the loader and rewritten in the current format by `caldera convert`, which requires its fingerprints."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from caldera.pipeline.checkpoint.convert import convert_checkpoint
from caldera.pipeline.checkpoint.format import CHECKSUM_FILE, CONFIG_FILE, FORMAT_VERSION, MODEL_FILE
from caldera.pipeline.checkpoint.loader import load_compressed
from tests.pipeline.checkpoint_helpers import copy_checkpoint, ids_logits, rechecksum, save_tiny_checkpoint


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A checkpoint with a ``bits`` summary, which the conversion carries over."""
    return save_tiny_checkpoint(tmp_path_factory.mktemp("convert") / "ck", seed=3, extra={"bits": {"avg_bits": 2.0}})


def _as_format1(path, dst):
    """The layout the format-1 writer produced: no config.json, no content manifest."""
    ck = copy_checkpoint(path, dst)
    (ck / "config.json").unlink()
    cfg = json.loads((ck / CONFIG_FILE).read_text())
    cfg.pop("manifest")
    cfg["format_version"] = 1
    (ck / CONFIG_FILE).write_text(json.dumps(cfg))
    rechecksum(ck)
    return ck


def test_old_checkpoint_is_converted(saved, tmp_path, capsys):
    """A format-1 checkpoint is refused by load_compressed with the convert command to run; `caldera convert`
    (which checks its checksums and fingerprints) writes the current format, which loads both ways with the same
    logits. A format-1 checkpoint whose fingerprints are gone cannot be converted."""
    from transformers import AutoModelForCausalLM

    from caldera.cli import main

    model, path = saved
    old = _as_format1(path, tmp_path / "old")
    with pytest.raises(ValueError, match=r"format_version 1 .*`caldera convert .*old --out NEW`"):
        load_compressed(old)
    new = tmp_path / "new"
    assert main(["convert", str(old), "--out", str(new)]) == 0
    assert (new / "config.json").exists() and (new / CHECKSUM_FILE).exists()
    assert torch.equal(ids_logits(load_compressed(new)[0]), ids_logits(model))
    assert torch.equal(ids_logits(AutoModelForCausalLM.from_pretrained(str(new))), ids_logits(model))
    assert json.loads((new / CONFIG_FILE).read_text())["bits"] == json.loads((path / CONFIG_FILE).read_text())["bits"]
    capsys.readouterr()
    assert main(["convert", str(old), "--out", str(new)]) == 2
    assert "already exists" in capsys.readouterr().err
    cfg = json.loads((old / CONFIG_FILE).read_text())
    cfg.pop("fingerprints")
    (old / CONFIG_FILE).write_text(json.dumps(cfg))
    rechecksum(old)
    assert main(["convert", str(old), "--out", str(tmp_path / "new2")]) == 2
    assert "has no reconstruction fingerprints" in capsys.readouterr().err


def test_conversion_keeps_every_tensor_and_the_recorded_keys(saved, tmp_path):
    """convert_checkpoint writes the stored tensors as they are (names, dtypes, values) and carries over the
    modules' metadata, tied names, method, method config, fingerprints and further keys (``bits``)."""
    _, path = saved
    new = convert_checkpoint(_as_format1(path, tmp_path / "old"), tmp_path / "new")
    assert new == tmp_path / "new"
    a, b = load_file(str(new / MODEL_FILE)), load_file(str(path / MODEL_FILE))
    assert a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
    ca, cb = (json.loads((p / CONFIG_FILE).read_text()) for p in (new, path))
    assert ca["format_version"] == FORMAT_VERSION and ca["manifest"]["tensors"] == cb["manifest"]["tensors"]
    kept = ("modules", "tied", "method", "method_config", "fingerprints", "bits")
    assert {k: ca[k] for k in kept} == {k: cb[k] for k in kept}
