"""The `caldera` command line, end to end on a tiny random LLaMA (no network, no cached assets)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch

from caldera import cli
from caldera.cli import common
from caldera.cli import evaluate as cli_evaluate

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


@pytest.mark.parametrize("what, own, others", [
    ("ppl", ["--seq-len", "--max-windows", "--source"], ["--new-tokens", "--dense", "--tasks", "--limit"]),
    ("zeroshot", ["--tasks", "--limit"], ["--new-tokens", "--seq-len", "--dense"]),
    ("throughput", ["--new-tokens", "--dense", "--calls"], ["--seq-len", "--tasks", "--limit"]),
])
def test_each_eval_subcommand_has_its_own_help(what, own, others, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["eval", what, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert all(f in out for f in own + ["--model", "--quiet", "--json", "--out"]), out
    assert not any(f in out for f in others), out


def _tiny_model_dir(path):
    from tests.helpers import tiny_llama, word_tokenizer

    tiny_llama(0, bos_token_id=1, eos_token_id=2, pad_token_id=0).save_pretrained(str(path))
    word_tokenizer().save_pretrained(str(path))
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
                "--json",
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
                "--json",
            ]
        )
        == 2  # --layers without --allow-partial builds no checkpoint: non-zero, saying why
    )
    cap = capsys.readouterr()
    r = json.loads(cap.out)
    assert r["computed"] == [0] and r["checkpoint"] is None and not ck.exists()
    assert "no checkpoint written: layers [1] of 2 are not compressed" in cap.err
    assert f"kept in {tmp_path / 'ck.layers'}" in cap.err and "--allow-partial" in cap.err
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
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()  # a short summary by default
    assert out[0] == f"1 layers compressed, 1 already there ({tmp_path / 'ck.layers'})"
    assert out[1] == f"checkpoint {ck}: 2.000 bits per weight" and len(out) == 3
    assert not (tmp_path / "ck.lock").exists()  # a clean exit leaves no lock file behind

    assert cli.main(["info", str(ck)]) == 0  # a short summary by default
    out = capsys.readouterr().out
    assert out.startswith(f"checkpoint  {ck}\nmethod      quip# (") and "bits/weight 2.000 (paper formula)" in out
    assert "  self_attn.k_proj   " in out and not out.lstrip().startswith("{")
    assert cli.main(["info", str(ck), "--json", "--out", str(tmp_path / "info.json")]) == 0
    info = _json_out(capsys)
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
    r = _json_out(capsys)
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


def test_matrix_report_is_lazy(monkeypatch):
    seen = {}
    fake = types.ModuleType("caldera.reports.matrix")
    fake.main = lambda argv: seen.setdefault("argv", argv) and 0
    monkeypatch.setitem(sys.modules, "caldera.reports.matrix", fake)
    assert cli.main(["matrix-report", "--quick", "--out", "x"]) == 0
    assert seen["argv"] == ["--quick", "--out", "x"]


# ---- commands that do what they say ------------------------------------------------------------------------


@pytest.mark.parametrize("spec, words", [
    ("5-2", "the range 5-2 is reversed (it selects no layer); write 2-5"),
    (",", "selects no layer"),
    ("a-b", "expected a list like 0,1,2"),
])
def test_layers_that_select_nothing_are_refused(spec, words):
    with pytest.raises(common.CLIError) as e:
        common.parse_layers(spec)
    assert words in str(e.value)


def test_compress_with_reversed_layers_exits_nonzero(tmp_path, capsys):
    argv = ["compress", "--model", "smollm2", "--hessians", str(tmp_path), "--method", "caldera", "--layers", "5-2",
            "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 2
    assert "reversed" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "2.5", "ten"])
def test_bad_limit_is_one_clear_line(value, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["eval", "zeroshot", "--model", "smollm2", "--limit", value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --limit" in err and "expected a number of documents per task" in err and "islice" not in err


def test_limit_values_kept():
    assert common.parse_limit("100") == 100 and isinstance(common.parse_limit("100"), int)
    assert common.parse_limit("0.25") == 0.25


@pytest.mark.parametrize("name", ["./results/nosuch", "~/nosuch-model", "/abs/nosuch", "a/b/c", "tests/nosuch",
                                  "bad name!"])
def test_mistyped_local_path_is_one_line_not_a_hub_request(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # tests/ exists here: "tests/nosuch" is a local typo
    import caldera.pipeline.assets as assets

    monkeypatch.setattr(assets, "load_model", lambda *a, **k: pytest.fail("reached the hub"))
    assert cli.main(["hessians", "--model", name, "--out", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err
    assert f"--model {name}: no such folder" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["meta-llama/Llama-2-7b-hf", "gpt2"])
def test_hub_ids_still_go_to_the_hub(name):
    assert not common.looks_like_path(name) and common.resolve_model_path(name) == name


def test_second_compress_into_one_folder_refuses_and_stale_lock_is_taken_over(tmp_path, capsys):
    import fcntl
    import subprocess
    import sys

    out = tmp_path / "ckpt"
    argv = ["compress", "--model", "./nosuch", "--hessians", str(tmp_path), "--method", "caldera", "--out", str(out)]
    lock = tmp_path / "ckpt.lock"
    with open(lock, "w") as held:  # a running compress holds the lock
        held.write("4242\n")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert f"another run (pid 4242) is writing into {out}" in err
    # a run killed with -9 leaves the file, with its pid, but not the lock
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.write_text(dead.stdout)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "another run" not in err and "--model ./nosuch: no such folder" in err  # got past the lock
    assert not lock.exists()  # the run that took it over deleted it on its way out


# ---- command output that makes its point ------------------------------------------------------------------


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


def test_compress_help_lists_every_methods_parameters(capsys):
    from caldera.methods import registered_methods

    with pytest.raises(SystemExit):
        cli.main(["compress", "--help"])
    out = capsys.readouterr().out
    for m in registered_methods():
        assert f"\n  {m}\n      " in out, m
    assert "\n  rtn\n      bits=2 per_row=True" in out and "lr_rank=64" in out and "authors-2025" in out


def test_lm_eval_help_shows_the_include_path_of_the_shipped_tasks(monkeypatch, capsys):
    from caldera.eval.zeroshot import tasks_dir

    fake = types.ModuleType("lm_eval.__main__")
    fake.cli_evaluate = lambda: None
    monkeypatch.setitem(sys.modules, "lm_eval.__main__", fake)
    assert cli.main(["lm-eval", "--help"]) == 0
    assert f"--include_path {tasks_dir()}" in capsys.readouterr().out


def test_zeroshot_prints_a_summary_and_writes_the_documents_only_to_the_file(tmp_path, monkeypatch, capsys):
    import caldera.eval.zeroshot as zs

    docs = [{"doc_id": i, "acc": float(i < 3), "margin": 0.1} for i in range(10)]
    res = {"tasks": {"caldera_arc_easy": {"acc": 0.3, "acc_norm": 0.2, "n": 10, "docs": docs}}, "limit": 10}
    monkeypatch.setattr(cli_evaluate, "load_any_model", lambda name: (None, object(), "dense"))
    monkeypatch.setattr(zs, "zeroshot", lambda *a, **k: json.loads(json.dumps(res)))
    argv = ["eval", "zeroshot", "--model", "x", "--tasks", "caldera_arc_easy"]
    assert cli.main([*argv, "--out", str(tmp_path / "zs.json")]) == 0
    out = capsys.readouterr().out
    from caldera.stats import wilson_interval

    lo, hi = wilson_interval(3, 10)
    assert f"caldera_arc_easy            10    30.0 [{100 * lo:5.1f}, {100 * hi:5.1f}]" in out
    assert "doc_id" not in out and out.rstrip().endswith(f"full records: {tmp_path / 'zs.json'}")
    assert json.loads((tmp_path / "zs.json").read_text())["tasks"]["caldera_arc_easy"]["docs"] == docs
    assert cli.main([*argv, "--json"]) == 0
    printed = _json_out(capsys)
    assert "docs" not in printed["tasks"]["caldera_arc_easy"] and printed["tasks"]["caldera_arc_easy"]["acc"] == 0.3
    assert "pass --out FILE" in printed["docs"]


def test_a_model_that_cannot_be_loaded_is_one_line(tmp_path, monkeypatch, capsys):
    import caldera.pipeline.assets as assets

    def offline(*a, **k):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your connection")

    monkeypatch.setattr(assets, "load_model", offline)
    assert cli.main(["eval", "ppl", "--model", "org/nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err == ("caldera eval: error: --model org/nosuch: no local folder of that name, and as a hub id it could "
                   "not be loaded (We couldn't connect to 'https://huggingface.co' to load the files.)")


def test_log_lines_go_through_tqdm(monkeypatch):
    """Log records are printed with tqdm.write, so they land above a progress bar, not inside it."""
    import io
    import logging

    import tqdm

    seen = []
    monkeypatch.setattr(tqdm.tqdm, "write", classmethod(lambda cls, s, file=None, **k: seen.append((s, file))))
    stream = io.StringIO()
    h = common.TqdmLogHandler(stream)
    h.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    log = logging.getLogger("caldera.test.tqdm")
    log.addHandler(h)
    log.propagate = False
    try:
        log.warning("layer %d done", 3)
    finally:
        log.removeHandler(h)
        log.propagate = True
    assert seen == [("caldera.test.tqdm: layer 3 done", stream)] and stream.getvalue() == ""


def test_compress_with_a_per_matrix_rank_method_allocates_over_every_layer_first(tmp_path, monkeypatch, capsys):
    """`caldera compress --method caldera-rank-per-layer`: the allocation is made from every decoder layer's
    Hessians (even with --layers), written beside the layers, reused by the next run, and each matrix gets its
    rank; --allocation of another config is refused."""
    from caldera.pipeline import text

    model_dir = _tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setattr(text, "calibration_sequences", lambda tok, n, t, seed, source=None: torch.randint(
        3, 128, (n, t), generator=torch.Generator().manual_seed(seed)))
    h, ck = tmp_path / "hess", tmp_path / "ck"
    assert cli.main(["hessians", "--model", str(model_dir), "--out", str(h), "--n-samples", "4", "--seq-len", "16",
                     "--quiet"]) == 0
    capsys.readouterr()
    argv = ["compress", "--model", str(model_dir), "--hessians", str(h), "--method", "caldera-rank-per-layer",
            "--param", "rank=4", "--param", "min_rank=2", "--param", "rank_multiple=2", "--param", "outer_iters=1",
            "--param", "l_bits=16", "--param", "r_bits=16", "--out", str(ck), "--quiet"]
    assert cli.main([*argv, "--layers", "0", "--no-assemble"]) == 0
    capsys.readouterr()
    alloc = json.loads((tmp_path / "ck.layers/allocation.json").read_text())
    assert len(alloc["overrides"]) == 14  # both layers' matrices, though only layer 0 was compressed
    assert cli.main([*argv, "--json"]) == 0
    out = _json_out(capsys)
    assert out["checkpoint"] and out["computed"] == [1] and out["skipped"] == [0]
    cfg = json.loads((ck / "caldera_config.json").read_text()) if (ck / "caldera_config.json").is_file() else \
        json.loads((ck / "config.json").read_text())["quantization_config"]
    ranks = {k.split("layers.", 1)[1]: m["rank"] for k, m in cfg["modules"].items()}
    assert ranks == {k: o["rank"] for k, o in alloc["overrides"].items()}
    (tmp_path / "other.json").write_text(json.dumps({**alloc, "method_config": {**alloc["method_config"],
                                                                                "rank": 6}}))
    assert cli.main([*argv, "--out", str(tmp_path / "ck2"), "--allocation", str(tmp_path / "other.json")]) == 2
    assert "run the allocation again" in capsys.readouterr().err
