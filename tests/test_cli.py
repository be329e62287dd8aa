"""The `caldera` command line, end to end on a tiny random LLaMA (no network, no cached assets)."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch

from caldera import cli

COMMANDS = ["assets", "hessians", "compress", "eval", "info", "convert"]


@pytest.mark.parametrize("argv", [[], *[[c] for c in COMMANDS]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([*argv, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "usage: caldera" in out


def _tiny_model_dir(path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    LlamaForCausalLM(cfg).save_pretrained(str(path))
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, 128)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<unk>"
    ).save_pretrained(str(path))
    return path


def _json_out(capsys):
    return json.loads(capsys.readouterr().out)


def test_pipeline_end_to_end(tmp_path, monkeypatch, capsys):
    from caldera.pipeline import text

    model_dir = _tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setattr(
        text,
        "calibration_sequences",
        lambda tok, n, t, seed, source=None: torch.randint(
            3, 128, (n, t), generator=torch.Generator().manual_seed(seed)
        ),
    )
    monkeypatch.setattr(
        text,
        "perplexity_stream",
        lambda tok, source: torch.randint(3, 128, (1, 40), generator=torch.Generator().manual_seed(1)),
    )
    h, ck = tmp_path / "hess", tmp_path / "ck"

    assert (
        cli.main(
            [
                "hessians",
                "--model",
                str(model_dir),
                "--out",
                str(h),
                "--n-samples",
                "4",
                "--seq-len",
                "16",
                "--quiet",
            ]
        )
        == 0
    )
    assert _json_out(capsys)["computed"] == [0, 1]

    assert (
        cli.main(
            [
                "compress",
                "--model",
                str(model_dir),
                "--hessians",
                str(h),
                "--method",
                "quip#",
                "--layers",
                "0",
                "--out",
                str(ck),
                "--quiet",
            ]
        )
        == 0
    )
    r = _json_out(capsys)
    assert r["computed"] == [0] and r["checkpoint"] is None and "allow-partial" in r["note"]
    assert (
        cli.main(
            [
                "compress",
                "--model",
                str(model_dir),
                "--hessians",
                str(h),
                "--method",
                "quip#",
                "--param",
                "refine_passes=0",
                "--out",
                str(ck),
                "--quiet",
            ]
        )
        == 0
    )
    r = _json_out(capsys)
    assert r["computed"] == [1] and r["skipped"] == [0] and r["checkpoint"] == str(ck)
    assert r["bits"]["average_bits"] == 2.0

    assert cli.main(["info", str(ck)]) == 0
    info = _json_out(capsys)
    assert info["method"] == "quip#" and info["n_compressed_modules"] == 14 and info["ranks"] == [0]
    assert set(info["error_by_linear"]) == {
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    }

    assert cli.main(["eval", "ppl", "--model", str(ck), "--seq-len", "8", "--max-windows", "2", "--quiet"]) == 0
    r = _json_out(capsys)
    assert r["kind"] == "compressed" and r["n_windows"] == 2 and r["ppl"] > 1

    assert (
        cli.main(
            [
                "eval",
                "throughput",
                "--model",
                str(ck),
                "--dense",
                str(model_dir),
                "--new-tokens",
                "3",
                "--runs",
                "2",
                "--warmup",
                "1",
                "--calls",
                "2",
                "--prompt",
                "w5 w6 w7",
            ]
        )
        == 0
    )
    r = _json_out(capsys)
    assert set(r["models"]) == {"dense", "compressed"}
    for m in r["models"].values():
        assert m["decode"]["tokens_per_s"] > 0 and m["decode"]["new_tokens"] == 3
        assert m["single_token"]["tokens_per_s"] > 0


def test_errors_say_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CALDERA_CACHE", str(tmp_path / "empty-cache"))
    assert cli.main(["hessians", "--out", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err
    assert "smollm2 model is not cached" in err and "run `caldera assets --only smollm2` first" in err
    assert cli.main(["compress", "--hessians", str(tmp_path), "--method", "nope", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "unknown" in err and "caldera" in err and "quip#" in err
    assert cli.main(["info", str(tmp_path)]) == 2
    assert "not a compressed checkpoint" in capsys.readouterr().err
    with pytest.raises(cli.CLIError, match="key=value"):
        cli.parse_params(["rank"], None)
    assert cli.parse_params(["rank=8", "rht=false", "svd=exact", "sigma_reg=0.02"], "paper") == {
        "rank": 8,
        "rht": False,
        "svd": "exact",
        "sigma_reg": 0.02,
        "preset": "paper",
    }
    assert cli.parse_layers("0,2-4") == [0, 2, 3, 4] and cli.parse_layers(None) is None


def test_matrix_report_is_lazy(monkeypatch):
    seen = {}
    fake = types.ModuleType("caldera.reports.matrix")
    fake.main = lambda argv: seen.setdefault("argv", argv) and 0
    monkeypatch.setitem(sys.modules, "caldera.reports.matrix", fake)
    assert cli.main(["matrix-report", "--quick", "--out", "x"]) == 0
    assert seen["argv"] == ["--quick", "--out", "x"]
