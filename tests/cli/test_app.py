"""`caldera` and its dispatch (caldera.cli.app): the help of every command, the version, the whole pipeline
through the commands, and errors that say what to do."""

from __future__ import annotations

import json

import pytest
import torch

from caldera import cli
from caldera.cli import common
from tests.helpers import printed_json, tiny_model_dir

COMMANDS = ["assets", "hessians", "compress", "eval", "info", "convert"]


@pytest.mark.parametrize("argv", [[], *[[c] for c in COMMANDS]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([*argv, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "usage: caldera" in out


def test_top_level_help_lists_every_command_in_plain_text(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out and ":func:" not in out
    epilog = out[out.index("examples (caldera COMMAND --help for each):"):]
    subs = cli.build_parser()._subparsers._group_actions[0].choices
    for name, sub in subs.items():
        assert f"\n  caldera {name} " in epilog, name
        assert "`" not in sub.format_help(), name  # plain text: no Markdown or reST markup


def test_version_and_an_example_in_every_subcommands_help(capsys):
    from caldera import __version__

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"caldera {__version__}"
    parser = cli.build_parser()
    subs = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction)).choices
    for name, sub in subs.items():
        if name in ("lm-eval", "matrix-report"):  # their arguments (and --help) go to the tool they wrap
            continue
        assert f"example:\n  caldera {name} " in sub.format_help(), name


def test_pipeline_end_to_end(tmp_path, monkeypatch, capsys):
    from caldera.pipeline import text

    model_dir = tiny_model_dir(tmp_path / "tiny")
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
                "--json",
            ]
        )
        == 0
    )
    assert printed_json(capsys)["computed"] == [0, 1]

    def compress(*args):
        return cli.main(["compress", "--model", str(model_dir), "--hessians", str(h), "--method", "quip#", *args])

    # --layers without --allow-partial builds no checkpoint: non-zero, saying why
    assert compress("--layers", "0", "--out", str(ck), "--quiet", "--json") == 2
    cap = capsys.readouterr()
    r = json.loads(cap.out)
    assert r["computed"] == [0] and r["checkpoint"] is None and not ck.exists()
    assert "no checkpoint written: layers [1] of 2 are not compressed" in cap.err
    assert f"kept in {tmp_path / 'ck.layers'}" in cap.err and "--allow-partial" in cap.err
    assert compress("--param", "refine_passes=0", "--out", str(ck)) == 0
    out = capsys.readouterr().out.splitlines()  # a short summary by default
    assert out[0] == f"1 layers compressed, 1 already there ({tmp_path / 'ck.layers'})"
    assert out[1] == f"checkpoint {ck}: 2.000 bits per weight" and len(out) == 3
    assert not (tmp_path / "ck.lock").exists()  # a clean exit leaves no lock file behind

    assert cli.main(["info", str(ck)]) == 0  # a short summary by default
    out = capsys.readouterr().out
    assert out.startswith(f"checkpoint  {ck}\nbase model  {model_dir} (weights sha256 ")  # then the provenance
    assert "\nmethod      quip# (" in out and "bits/weight 2.000 (paper formula)" in out
    assert "  self_attn.k_proj   " in out and not out.lstrip().startswith("{")
    assert cli.main(["info", str(ck), "--json", "--out", str(tmp_path / "info.json")]) == 0
    info = printed_json(capsys)
    assert json.loads((tmp_path / "info.json").read_text()) == info
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

    ppl = ["eval", "ppl", "--model", str(ck), "--seq-len", "8", "--max-windows", "2", "--quiet"]
    assert cli.main(ppl) == 0
    assert capsys.readouterr() == ("", "")  # --quiet: no progress bar, no summary
    assert cli.main([*ppl, "--json"]) == 0
    r = printed_json(capsys)
    assert r["kind"] == "compressed" and r["n_windows"] == 2 and r["ppl"] > 1
    assert cli.main([*ppl[:-1], "--out", str(tmp_path / "ppl.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"perplexity {r['ppl']:.2f}  [{r['ppl_lo']:.2f}, {r['ppl_hi']:.2f}] 95 %")
    assert lines[-1] == f"full records: {tmp_path / 'ppl.json'}"
    assert json.loads((tmp_path / "ppl.json").read_text())["window_nll"] == r["window_nll"]

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
                "--json",
            ]
        )
        == 0
    )
    r = printed_json(capsys)
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
    with pytest.raises(common.CLIError, match="key=value"):
        common.parse_params(["rank"], None)
    assert common.parse_params(["rank=8", "rht=false", "svd=exact", "sigma_reg=0.02"], "paper") == {
        "rank": 8,
        "rht": False,
        "svd": "exact",
        "sigma_reg": 0.02,
        "preset": "paper",
    }
    assert common.parse_layers("0,2-4") == [0, 2, 3, 4] and common.parse_layers(None) is None


def _parsers(parser, path=("caldera",)):
    """``(command path, parser)`` of every parser under ``parser``, nested subcommands (``eval ppl``) included."""
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_option_of_every_command_has_help_and_shows_its_default():
    """Walks the whole parser: an argument (option or positional) without help text fails, and so does an
    option with a default (not None, not a flag's False) whose help shows no default."""
    import argparse

    missing, no_default, seen = [], [], 0
    for path, parser in _parsers(cli.build_parser()):
        fmt = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
                continue
            seen += 1
            name = f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}"
            if not action.help or action.help is argparse.SUPPRESS:
                missing.append(name)
            elif action.default not in (None, False, argparse.SUPPRESS) and "default" not in fmt._expand_help(
                    action).lower():
                no_default.append(name)
    assert seen > 60  # every command's options were walked
    assert not missing, f"arguments without help: {missing}"
    assert not no_default, f"options whose help shows no default: {no_default}"


def test_a_default_shows_in_the_printed_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["eval", "throughput", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--model MODEL checkpoint, smollm2, gemma3, local folder or hub name (default: smollm2)" in out
    assert "--runs RUNS timed runs (median) (default: 5)" in out
