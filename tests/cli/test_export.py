"""`caldera export` and `caldera convert` (caldera.cli.export): the folder each writes, what it prints, and
errors that name the folder and the fix. The checkpoint is a tiny LLaMA compressed with QuIP# (identity Hessians)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from caldera import cli
from caldera.pipeline.checkpoint import CONFIG_FILE, load_compressed, save_compressed
from tests.helpers import printed_json, word_tokenizer
from tests.pipeline.checkpoint_helpers import (
    IDS,
    compress_in_place,
    copy_checkpoint,
    edit_config,
    rechecksum,
    tiny_llama,
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """``(model, folder)``: the compressed model and its saved checkpoint (with the word tokenizer)."""
    model, cfg = compress_in_place(tiny_llama(seed=5))
    folder = tmp_path_factory.mktemp("export") / "ck"
    save_compressed(model, folder, method="quip#", method_config=dataclasses.asdict(cfg), tokenizer=word_tokenizer())
    return model, folder


def test_export_writes_a_plain_model_with_the_compressed_logits(checkpoint, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, ck = checkpoint
    out = tmp_path / "dense"
    assert cli.main(["export", str(ck), "--out", str(out)]) == 0
    assert capsys.readouterr().out == (f"exported {ck} to {out}: a plain Hugging Face folder (dense weights, config, "
                                       "tokenizer) that AutoModelForCausalLM.from_pretrained loads without caldera\n")
    assert cli.main(["export", str(ck), "--out", str(tmp_path / "again"), "--json"]) == 0
    assert printed_json(capsys) == {"exported": str(tmp_path / "again"), "checkpoint": str(ck)}
    dense = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert all(type(m).__name__ != "CompressedLinear" for m in dense.modules())
    with torch.no_grad():
        ref, got = model(torch.tensor(IDS)).logits, dense(torch.tensor(IDS)).logits
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
    assert AutoTokenizer.from_pretrained(str(out))("w5 w9")["input_ids"][-2:] == [5, 9]


@pytest.mark.parametrize("command", ["export", "convert"])
def test_an_existing_out_folder_is_refused_and_kept(checkpoint, tmp_path, capsys, command):
    _, ck = checkpoint
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    assert cli.main([command, str(ck), "--out", str(out)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err == (f"caldera {command}: error: --out {out} already exists; nothing was "
                                         "written and nothing is replaced: choose a new --out (or remove it "
                                         "yourself)\n")
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


@pytest.mark.parametrize("command", ["export", "convert"])
def test_a_missing_checkpoint_points_to_compress(tmp_path, capsys, command):
    assert cli.main([command, str(tmp_path / "nosuch"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"caldera {command}: error: checkpoint: no such folder: {tmp_path / 'nosuch'}; ")
    assert len(err.splitlines()) == 1 and "`caldera compress`" in err
    assert not (tmp_path / "out").exists()


def test_convert_writes_a_format_1_checkpoint_in_the_current_format(checkpoint, tmp_path, capsys):
    model, ck = checkpoint
    old, new = copy_checkpoint(ck, tmp_path / "old"), tmp_path / "new"
    (old / "config.json").unlink()  # format 1: no config.json, no content manifest
    edit_config(lambda c: (c.pop("manifest"), c.update(format_version=1)))(old)
    rechecksum(old)
    with pytest.raises(ValueError, match="format_version 1"):
        load_compressed(old)
    assert cli.main(["convert", str(old), "--out", str(new), "--json"]) == 0
    assert printed_json(capsys) == {"converted": str(new), "checkpoint": str(old)}
    assert json.loads((new / CONFIG_FILE).read_text())["format_version"] == 2 and (new / "config.json").is_file()
    converted, _ = load_compressed(new)
    with torch.no_grad():
        assert torch.equal(converted(torch.tensor(IDS)).logits, model(torch.tensor(IDS)).logits)


@pytest.mark.parametrize("command", ["export", "convert"])
def test_out_is_required(capsys, command):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "ck"])
    assert e.value.code == 2 and "the following arguments are required: --out" in capsys.readouterr().err
