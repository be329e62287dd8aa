"""caldera.pipeline.checkpoint.writer: the folder save_compressed writes (files, configs, content manifest,
checksums, no temporary folder left) and the tokenizer it copies or saves."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from caldera.pipeline.checkpoint.card import model_card
from caldera.pipeline.checkpoint.format import (
    CARD_FILE,
    CHECKSUM_FILE,
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    GUARD_KEY,
    MODEL_FILE,
    NEEDS_CALDERA,
)
from caldera.pipeline.checkpoint.loader import load_compressed
from caldera.pipeline.checkpoint.writer import save_compressed
from tests.helpers import word_tokenizer


def test_a_tokenizer_folder_is_copied_and_loads_as_the_saved_tokenizer(saved, tmp_path):
    """``tokenizer=<folder>``: its tokenizer files byte for byte, listed in the manifest, and the tokenizer
    loaded from the checkpoint encodes as the one ``save_pretrained`` wrote; a folder without one is refused."""
    model, path = saved
    src = tmp_path / "src"
    word_tokenizer().save_pretrained(src)
    (src / "config.json").write_text("{}")  # not a tokenizer file: not copied
    cfg = json.loads((path / CONFIG_FILE).read_text())
    ck = save_compressed(model, tmp_path / "ck", method="quip#", method_config=cfg["method_config"], tokenizer=src)
    tok_files = sorted(p.name for p in src.iterdir() if p.name != "config.json")
    assert tok_files and all((ck / f).read_bytes() == (src / f).read_bytes() for f in tok_files)
    assert json.loads((ck / "config.json").read_text()) != {}
    manifest = json.loads((ck / CONFIG_FILE).read_text())["manifest"]["files"]
    assert set(tok_files) <= set(manifest)
    _, tok = load_compressed(ck)
    _, tok_saved = load_compressed(path)
    text = "w3 w17 w99 zz w5"
    assert tok(text)["input_ids"] == tok_saved(text)["input_ids"] == word_tokenizer()(text)["input_ids"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no tokenizer file"):
        save_compressed(model, tmp_path / "ck2", method="quip#", method_config=cfg["method_config"],
                        tokenizer=tmp_path / "empty")
    assert not (tmp_path / "ck2").exists()


def test_layout(saved):
    model, path = saved
    files = {p.name for p in path.iterdir()}
    assert {MODEL_FILE, CONFIG_FILE, CHECKSUM_FILE} <= files
    assert not list(path.parent.glob("*.tmp-*"))
    cfg = json.loads((path / CONFIG_FILE).read_text())
    assert cfg["format_version"] == 2 and cfg["method"] == "quip#"
    hf = json.loads((path / "config.json").read_text())  # what from_pretrained / lm-eval read
    qc = hf["quantization_config"]
    assert {k: qc[k] for k in ("quant_method", "format_version", "method")} == {
        "quant_method": "caldera", "format_version": 2, "method": "quip#"}
    # the scheme, as caldera_config.json's modules say it: rank 0, E8P codes, the RHT, no layer kept dense
    assert (qc["ranks"], qc["q_quantizers"], qc["rht"], qc["dense_layers"]) == ([0], ["e8p"], [True], [])
    assert {k: v for k, v in hf.items() if k not in ("quantization_config", GUARD_KEY)} == cfg["base_config"]
    assert hf[GUARD_KEY] == NEEDS_CALDERA  # transformers without caldera refuses the folder with it
    man = cfg["manifest"]
    assert set(man["tensors"]) == set(load_file(str(path / MODEL_FILE)))  # every tensor, RHT signs included
    assert "model.layers.0.self_attn.q_proj.S_U" in man["tensors"]
    assert set(man["files"]) == files - {MODEL_FILE, CONFIG_FILE, CHECKSUM_FILE} and "config.json" in man["files"]
    assert cfg["tied"] == {"lm_head.weight": "model.embed_tokens.weight"}
    assert len(cfg["modules"]) == 14
    m = cfg["modules"]["model.layers.0.self_attn.k_proj"]
    assert (m["out_features"], m["in_features"], m["rank"], m["q_quantizer"]) == (32, 64, 0, "e8p")
    sums = json.loads((path / CHECKSUM_FILE).read_text())["sha256"]
    assert set(sums) == files - {CHECKSUM_FILE}
    from safetensors import safe_open

    with safe_open(str(path / MODEL_FILE), "pt") as f:
        keys = set(f.keys())
    assert "model.layers.1.mlp.down_proj.Q_codes" in keys and "model.norm.weight" in keys
    assert "model.layers.0.self_attn.q_proj.weight" not in keys and "lm_head.weight" not in keys


def test_card_and_generation_config_are_written_listed_and_the_same_bytes_on_a_rerun(saved, tmp_path):
    """The model card (the card of the config written) and the base model's generation config (byte for byte)
    are in the folder, the manifest and checksums.json; two writes of one model with one provenance hold the same
    bytes in every file (no time, no path recorded); without a generation config none is written."""
    model, path = saved
    cfg = json.loads((path / CONFIG_FILE).read_text())
    prov = {"base_model": {"name": "org/tiny", "weights_sha256": "cd" * 32}, "git_commit": "unknown",
            "caldera_version": "0.1.0", "calibration": {"source": "wikitext2", "n_tokens": 128, "seed": 0}}
    gen = b'{\n  "bos_token_id": 1,\n  "eos_token_id": 2\n}\n'
    a, b = (save_compressed(model, tmp_path / name, method="quip#", method_config=cfg["method_config"],
                            tokenizer=word_tokenizer(), extra={"provenance": prov}, generation_config=gen)
            for name in ("a", "b"))
    files = sorted(p.name for p in a.iterdir())
    assert files == sorted(p.name for p in b.iterdir()) and {CARD_FILE, GENERATION_CONFIG_FILE} <= set(files)
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    assert (a / GENERATION_CONFIG_FILE).read_bytes() == gen
    written = json.loads((a / CONFIG_FILE).read_text())
    assert written["provenance"] == prov
    card = (a / CARD_FILE).read_text()
    assert card == model_card({k: v for k, v in written.items() if k not in ("manifest", "fingerprints")})
    assert "org/tiny" in card and "wikitext2" in card
    sums = json.loads((a / CHECKSUM_FILE).read_text())["sha256"]
    assert {CARD_FILE, GENERATION_CONFIG_FILE} <= set(written["manifest"]["files"]) & set(sums)
    assert GENERATION_CONFIG_FILE not in {p.name for p in path.iterdir()} and (path / CARD_FILE).is_file()
