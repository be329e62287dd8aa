"""What the commands share (caldera.cli.common): argument parsing, model paths, one-line errors, the output
lock, log lines above progress bars."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from caldera import cli
from caldera.cli import common

COMMANDS = ["assets", "hessians", "compress", "eval", "info", "convert"]


@pytest.mark.parametrize("spec, words", [
    ("5-2", "the range 5-2 is reversed (it selects no layer); write 2-5"),
    (",", "selects no layer"),
    ("a-b", "expected a list like 0,1,2"),
])
def test_layers_that_select_nothing_are_refused(spec, words):
    with pytest.raises(common.CLIError) as e:
        common.parse_layers(spec)
    assert words in str(e.value)


def test_limit_values_kept():
    assert common.parse_limit("100") == 100 and isinstance(common.parse_limit("100"), int)
    assert common.parse_limit("0.25") == 0.25


@pytest.mark.parametrize("name", ["./results/nosuch", "~/nosuch-model", "/abs/nosuch", "a/b/c", "tests/nosuch",
                                  "bad name!"])
def test_mistyped_local_path_is_one_line_not_a_hub_request(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # tests/ exists here: "tests/nosuch" is a local typo
    import caldera.pipeline.assets as assets

    monkeypatch.setattr(assets, "load_model", lambda *a, **k: pytest.fail("reached the hub"))
    assert cli.main(["hessians", "--model", name, "--out", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err
    assert f"--model {name}: no such folder" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name, close", [("smolm2", "smollm2"), ("SmolLM2", "smollm2"), ("gemma", "gemma3"),
                                         ("llama", None)])
def test_an_unknown_bare_model_name_never_reaches_the_hub_and_gets_the_close_names(name, close, tmp_path,
                                                                                  monkeypatch, capsys):
    """A name without "/" that is no offline asset and no folder here is refused at once (no hub request, no
    retries), with difflib's close known names and the list of them all."""
    monkeypatch.chdir(tmp_path)
    import caldera.pipeline.assets as assets
    import caldera.pipeline.models as models

    monkeypatch.setattr(assets, "load_model", lambda *a, **k: pytest.fail("reached the hub"))
    monkeypatch.setattr(models, "resolve_model", lambda *a, **k: pytest.fail("resolved as a hub id"))
    for argv in (["hessians", "--model", name, "--out", str(tmp_path / "h")], ["eval", "ppl", "--model", name],
                 ["eval", "throughput", "--dense", name]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        opt = "--dense" if "--dense" in argv else "--model"
        assert len(err.splitlines()) == 1 and f"{opt} {name}: not a known model name nor a local folder; " in err
        assert ((f"did you mean {close}? " in err) if close else "did you mean" not in err), err
        assert "known names: gemma3, smollm2; a hub model is named org/name" in err
    assert not (tmp_path / "h").exists()


def test_a_bare_name_that_is_a_local_folder_or_an_asset_is_not_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mymodel").mkdir()
    assert common.unknown_model_name("mymodel") is None
    assert common.unknown_model_name("smollm2") is None and common.unknown_model_name("org/name") is None
    assert common.unknown_model_name("bad name!") is None  # not a hub id at all: a mistyped path (above)
    assert common.unknown_model_name("smolm2") is not None


def test_a_path_argument_that_does_not_exist_is_one_line_naming_it(tmp_path):
    (tmp_path / "f.json").write_text("{}")
    assert common.require_path(str(tmp_path), "--x") == tmp_path
    assert common.require_path(str(tmp_path / "f.json"), "--x", "file") == tmp_path / "f.json"
    assert common.require_path(str(tmp_path / "f.json"), "--x", "path") == tmp_path / "f.json"
    for value, kind, words in (
        ("nosuch", "folder", "--x: no such folder: {v}; make it"),
        ("nosuch", "file", "--x: no such file: {v}; make it"),
        ("nosuch", "path", "--x: no such file or folder: {v}; make it"),
        ("f.json", "folder", "--x: not a folder: {v}; make it"),
        ("", "file", "--x: not a file: {v}; make it"),
    ):
        v = str(tmp_path / value)
        with pytest.raises(common.CLIError) as e:
            common.require_path(v, "--x", kind, "make it")
        assert str(e.value) == words.format(v=v)


@pytest.mark.parametrize("raw, typ, value", [
    ("64", int, 64), ("-1", int, -1), ("true", bool, True), ("False", bool, False), ("0.02", float, 0.02),
    ("1", float, 1.0), ("1e-3", float, 1e-3), ("exact", str, "exact"), ("123", str, "123"), ("[1, 2]", list, [1, 2]),
])
def test_a_parameter_value_is_read_as_its_type(raw, typ, value):
    got = common._typed_value("p", raw, typ)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("raw, typ, words", [
    ("abc", int, "an integer (int)"), ("64.0", int, "an integer (int)"), ("true", int, "an integer (int)"),
    ("1e3", int, "an integer (int)"), ("", int, "an integer (int)"), ("yes", bool, "true or false (bool)"),
    ("1", bool, "true or false (bool)"), ("x", float, "a number (float)"), ("true", float, "a number (float)"),
])
def test_a_parameter_value_of_another_type_names_the_parameter_the_type_and_the_value(raw, typ, words):
    with pytest.raises(common.CLIError) as e:
        common._typed_value("rank", raw, typ)
    assert str(e.value) == f"--param rank={raw}: rank takes {words}, got {raw!r}"


def test_the_method_configs_give_each_parameter_its_type():
    from caldera.algorithm.config import CalderaConfig
    from caldera.methods.rank_per_layer import RankPerLayerConfig

    t = common.param_types(CalderaConfig)
    assert t["rank"] is int and t["rht"] is bool and t["sigma_reg"] is float and t["svd"] is str
    assert common.param_types(RankPerLayerConfig)["min_rank"] is int  # with the fields it inherits
    assert common.parse_params(["rank=8", "sigma_reg=1", "svd=exact", "new=3"], None, t) == {
        "rank": 8, "sigma_reg": 1.0, "svd": "exact", "new": 3}


def test_the_help_shows_an_options_default_unless_it_names_one_or_has_none():
    import argparse

    ap = argparse.ArgumentParser(formatter_class=common.HelpFormatter)
    ap.add_argument("--n", type=int, default=5, help="a count")
    ap.add_argument("--m", default="x", help="a name (default x)")
    ap.add_argument("--o", help="optional")
    ap.add_argument("--f", action="store_true", help="a flag")
    text = " ".join(ap.format_help().split())
    assert "--n N a count (default: 5)" in text and "--m M a name (default x) " in text
    assert "--o O optional " in text and "--f a flag" in text and text.count("default") == 2


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


def test_second_compress_into_one_folder_refuses_and_stale_lock_is_taken_over(tmp_path, capsys):
    import fcntl

    out = tmp_path / "ckpt"
    (tmp_path / "H").mkdir()  # a Hessians folder that records no model: --model is taken as given
    argv = ["compress", "--model", "./nosuch", "--hessians", str(tmp_path / "H"), "--method", "caldera", "--out",
            str(out)]
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


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _writers(tmp_path: Path) -> dict[str, tuple]:
    """Per command that writes: ``(argv for an output path, {input name: its path})``; every input exists and
    holds something of its own."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    hess = tmp_path / "H"
    hess.mkdir()
    (hess / "hessians.json").write_text("{}")
    (hess / "layer_000.safetensors").write_bytes(b"hessian")
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "caldera_config.json").write_text("{}")
    root = Path(__file__).resolve().parents[2]
    return {
        "hessians": (lambda out: ["hessians", "--model", str(model), "--out", out], {"model": model}),
        "compress": (lambda out: ["compress", "--model", str(model), "--hessians", str(hess), "--method", "quip#",
                                  "--out", out], {"hessians": hess, "model": model}),
        "eval ppl": (lambda out: ["eval", "ppl", "--model", str(ck), "--out", out], {"ck": ck}),
        "eval zeroshot": (lambda out: ["eval", "zeroshot", "--model", str(ck), "--out", out], {"ck": ck}),
        "eval throughput": (lambda out: ["eval", "throughput", "--model", str(ck), "--dense", str(model), "--out",
                                         out], {"ck": ck, "model": model}),
        "info": (lambda out: ["info", str(ck), "--out", out], {"ck": ck}),
        "export": (lambda out: ["export", str(ck), "--out", out], {"ck": ck}),
        "convert": (lambda out: ["convert", str(ck), "--out", out], {"ck": ck}),
        "cost": (lambda out: ["cost", "--configfile", str(root / "config/mini.yaml"), "--calibrate", str(ck),
                              "--profile", out], {"ck": ck}),
        "matrix-report": (lambda out: ["matrix-report", "--out", out], {}),
    }


WRITERS = ["hessians", "compress", "eval ppl", "eval zeroshot", "eval throughput", "info", "export", "convert",
           "cost", "matrix-report"]


@pytest.mark.parametrize("command", WRITERS)
def test_no_command_writes_over_a_file_or_folder_it_did_not_write(command, tmp_path, capsys):
    """Every command that writes refuses, before any work, an output path that holds an unrelated file or
    folder, and every one of its own inputs; each is left byte for byte."""
    argv, inputs = _writers(tmp_path)[command]
    (tmp_path / "notes.txt").write_text("precious")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    before = _tree(tmp_path)
    for target in (tmp_path / "notes.txt", tmp_path / "mine"):
        for extra in ([], ["--overwrite"]) if command == "compress" else ([],):
            assert cli.main([*argv(str(target)), *extra]) == 2, target
            err = capsys.readouterr().err
            assert f"--out {target} already exists" in err or f"--profile {target} already exists" in err, err
            assert "nothing was written and nothing is replaced" in err, err
    for name, path in inputs.items():
        for extra in ([], ["--overwrite"]) if command == "compress" else ([],):
            assert cli.main([*argv(str(path)), *extra]) == 2, name
            err = capsys.readouterr().err
            assert f"{path} is the" in err and "an input of this command" in err, err
    assert _tree(tmp_path) == before


def _writer_that_dies(monkeypatch):
    """The checkpoint writer's ``save_file`` replaced by one that writes, then fails ("disk full"), as a full disk
    does midway; returns the real one, to put back."""
    from caldera.pipeline.checkpoint import writer

    real = writer.save_file

    def dies(*a, **k):
        real(*a, **k)
        raise OSError("disk full")

    monkeypatch.setattr(writer, "save_file", dies)
    return real


def test_compress_replaces_a_checkpoint_only_with_overwrite_and_never_the_hessians(tmp_path, monkeypatch, capsys):
    """A checkpoint at --out is replaced only with --overwrite, and stays whole until the new one is complete
    (a writer that fails midway leaves it byte for byte); --out or --work-dir on the Hessians is refused."""
    from caldera.pipeline.checkpoint import load_compressed, writer
    from tests.helpers import tiny_hessians

    model_dir, h = tiny_hessians(tmp_path, monkeypatch, n_samples=2, seq_len=8)
    ck = tmp_path / "ck"
    hessians = _tree(h)

    def compress(*args):
        return cli.main(["compress", "--model", str(model_dir), "--hessians", str(h), "--method", "quip#", "--quiet",
                         *args])

    assert compress("--out", str(ck)) == 0
    first = _tree(ck)
    assert compress("--out", str(ck)) == 2
    assert f"--out {ck} already holds a caldera checkpoint; pass --overwrite" in capsys.readouterr().err
    real = _writer_that_dies(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        compress("--out", str(ck), "--overwrite")
    assert _tree(ck) == first and not list(tmp_path.glob("ck.tmp-*"))
    monkeypatch.setattr(writer, "save_file", real)
    assert compress("--out", str(ck), "--overwrite") == 0
    load_compressed(ck, load_tokenizer=False)
    for args in (["--out", str(h)], ["--out", str(tmp_path / "ck3"), "--work-dir", str(h)],
                 ["--out", str(h / "ck")]):
        assert compress(*args, "--overwrite") == 2
        assert "an input of this command" in capsys.readouterr().err
    assert compress("--out", str(tmp_path / "ck4"), "--work-dir", str(model_dir)) == 2
    assert "is the --model" in capsys.readouterr().err
    assert _tree(h) == hessians


def test_overwrite_replaces_a_checkpoint_of_another_method_and_its_layers_only_once_the_new_one_is_complete(
        tmp_path, monkeypatch, capsys):
    """--overwrite over a checkpoint an RTN run wrote, now with QuIP#: the earlier run's OUT.layers (RTN layer
    files, which this run cannot resume from) is set aside, not deleted, until the new checkpoint is complete; a
    run that fails midway brings back both the checkpoint and the layers byte for byte; then the replacement
    leaves QuIP#'s checkpoint and layers and nothing set aside. An explicit --work-dir of another method is
    never replaced (refused as before)."""
    from caldera.pipeline.checkpoint import read_config, writer
    from tests.helpers import tiny_hessians

    model_dir, h = tiny_hessians(tmp_path, monkeypatch, n_samples=2, seq_len=8)
    ck, layers = tmp_path / "ck", tmp_path / "ck.layers"

    def compress(method, *args):
        return cli.main(["compress", "--model", str(model_dir), "--hessians", str(h), "--method", method, "--quiet",
                         "--out", str(ck), *args])

    assert compress("rtn", "--param", "bits=2") == 0
    before = (_tree(ck), _tree(layers))
    real = _writer_that_dies(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        compress("quip#", "--overwrite")
    assert (_tree(ck), _tree(layers)) == before and not (tmp_path / "ck.layers.replaced").exists()
    monkeypatch.setattr(writer, "save_file", real)
    assert compress("quip#", "--overwrite") == 0
    assert read_config(ck)["method"] == "quip#" and not (tmp_path / "ck.layers.replaced").exists()
    assert {json.loads(p.read_text())["method"] for p in layers.glob("layer_[0-9][0-9][0-9].json")} == {"quip#"}
    other = tmp_path / "rtn-layers"
    assert cli.main(["compress", "--model", str(model_dir), "--hessians", str(h), "--method", "rtn", "--quiet",
                     "--param", "bits=2", "--out", str(tmp_path / "ck2"), "--work-dir", str(other)]) == 0
    capsys.readouterr()
    assert compress("quip#", "--overwrite", "--work-dir", str(other)) == 2
    assert "was computed with method 'rtn'" in capsys.readouterr().err
    assert {json.loads(p.read_text())["method"] for p in other.glob("layer_[0-9][0-9][0-9].json")} == {"rtn"}


def test_a_file_in_the_lock_files_place_is_never_overwritten(tmp_path, capsys):
    (tmp_path / "H").mkdir()
    (tmp_path / "H" / "hessians.json").write_text('{"model": "smollm2"}')  # the model compress takes from it
    (tmp_path / "ck.lock").write_text("my notes")
    argv = ["compress", "--hessians", str(tmp_path / "H"), "--method", "quip#", "--out", str(tmp_path / "ck")]
    assert cli.main(argv) == 2
    assert "ck.lock exists and is not a lock this command wrote" in capsys.readouterr().err
    assert (tmp_path / "ck.lock").read_text() == "my notes"


# every numeric option of every command: (command argv before it, option, values out of range)
NUMERIC = [
    (["hessians", "--out", "H"], "--n-samples", ["0", "-1"]),
    (["hessians", "--out", "H"], "--seq-len", ["0", "-5"]),
    (["hessians", "--out", "H"], "--seed", ["-1", str(2**63)]),
    (["hessians", "--out", "H"], "--batch-size", ["0"]),
    (["compress", "--hessians", "H", "--out", "C"], "--ft-rank", ["-1"]),
    (["eval", "ppl"], "--threads", ["0", "-1"]),
    (["eval", "ppl"], "--seq-len", ["1", "0"]),
    (["eval", "ppl"], "--n-windows", ["0"]),
    (["eval", "ppl"], "--max-windows", ["0", "-1"]),
    (["eval", "ppl"], "--seed", ["-1", str(2**63)]),
    (["eval", "ppl"], "--batch-size", ["0", "-2"]),
    (["eval", "zeroshot"], "--batch-size", ["0"]),
    (["eval", "zeroshot"], "--threads", ["0"]),
    (["eval", "throughput"], "--threads", ["-1"]),
    (["eval", "throughput"], "--new-tokens", ["0"]),
    (["eval", "throughput"], "--runs", ["0"]),
    (["eval", "throughput"], "--warmup", ["-1"]),
    (["eval", "throughput"], "--calls", ["0"]),
    (["eval", "throughput"], "--prompt-len", ["0"]),
    (["matrix-report", "--out", "MR"], "--rank", ["0", "-1", "256"]),
    (["matrix-report", "--out", "MR"], "--outer-iters", ["0", "-1", "101"]),
]


@pytest.mark.parametrize("head, option, values", NUMERIC, ids=[f"{' '.join(h[:2])} {o}" for h, o, _ in NUMERIC])
def test_every_numeric_option_is_typed_and_bounded_before_any_work(head, option, values, capsys):
    """A value out of range, or no integer at all, is refused by the parser (exit 2, nothing loaded), naming the
    option and the accepted range."""
    for v in [*values, "1.5", "x", ""]:
        with pytest.raises(SystemExit) as e:
            cli.main([*head, option, v])
        err = capsys.readouterr().err
        assert e.value.code == 2 and f"argument {option}: " in err, (v, err)
        assert ("is out of range: expected an integer" in err) if v.lstrip("-").isdigit() else (
            f"invalid int value: '{v}'" in err), (v, err)


def test_lengths_beyond_the_models_positions_and_runs_beyond_memory_are_refused(tmp_path, monkeypatch, capsys):
    """--seq-len above max_position_embeddings (64 for the tiny model) is refused for perplexity and Hessians,
    --prompt-len + --new-tokens for throughput; a run whose estimate exceeds the available memory is refused
    naming the options to lower."""
    from tests.helpers import tiny_model_dir

    model = str(tiny_model_dir(tmp_path / "tiny"))
    for argv, words in (
        (["eval", "ppl", "--model", model, "--seq-len", "100000"],
         "--seq-len is 100000, above the model's max_position_embeddings (64)"),
        (["hessians", "--model", model, "--out", str(tmp_path / "H"), "--seq-len", "65"],
         "--seq-len is 65, above the model's max_position_embeddings (64)"),
        (["eval", "throughput", "--model", model, "--prompt-len", "60", "--new-tokens", "5"],
         "--prompt-len + --new-tokens is 65, above the model's max_position_embeddings (64)"),
    ):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert words in err and "use " in err, err
    monkeypatch.setattr(common, "available_memory", lambda: 1 << 10)
    assert cli.main(["eval", "ppl", "--model", model, "--seq-len", "64", "--batch-size", "4"]) == 2
    err = capsys.readouterr().err
    assert "perplexity on windows of --seq-len 64, --batch-size 4 at a time, needs about" in err, err
    assert "lower --batch-size or --seq-len" in err
    assert cli.main(["hessians", "--model", model, "--out", str(tmp_path / "H"), "--seq-len", "8"]) == 2
    assert "lower --n-samples, --seq-len or --batch-size" in capsys.readouterr().err
    assert not (tmp_path / "H").exists()


class Loaded(Exception):
    """Raised by a model loader the test replaced: the command got as far as loading weights."""


def _no_loading(monkeypatch):
    """Every model loader of the commands (dense, any, compressed) raises :class:`Loaded`."""
    import caldera.pipeline.checkpoint as checkpoint
    import caldera.pipeline.models as models

    def loaded(*a, **k):
        raise Loaded

    for mod, name in ((models, "load_dense"), (models, "load_any"), (checkpoint, "load_compressed")):
        monkeypatch.setattr(mod, name, loaded)


def test_lengths_and_memory_are_refused_from_config_json_before_any_weight_loads(tmp_path, monkeypatch, capsys):
    """--seq-len (eval ppl, hessians), --prompt-len + --new-tokens (eval throughput) and the memory estimates are
    checked against config.json alone, for a dense folder and a compressed checkpoint: with every model loader
    replaced by one that raises, each refusal still comes, while a run that fits reaches the loader."""
    from tests.helpers import tiny_model_dir
    from tests.pipeline.checkpoint_helpers import save_tiny_checkpoint

    dense = str(tiny_model_dir(tmp_path / "tiny"))
    _, ck = save_tiny_checkpoint(tmp_path / "ck")
    _no_loading(monkeypatch)
    too_long = "--seq-len is 65, above the model's max_position_embeddings (64)"
    for model in (dense, str(ck)):
        cases = [(["eval", "ppl", "--model", model, "--seq-len", "65"], too_long),
                 (["eval", "throughput", "--model", model, "--prompt-len", "60", "--new-tokens", "5"],
                  "--prompt-len + --new-tokens is 65, above the model's max_position_embeddings (64)")]
        if model == dense:
            cases += [(["hessians", "--model", model, "--out", str(tmp_path / "H"), "--seq-len", "65"], too_long),
                      (["eval", "throughput", "--model", str(ck), "--dense", model, "--prompt-len", "64",
                        "--new-tokens", "1"], "is 65, above the model's max_position_embeddings (64)")]
        for argv, words in cases:
            assert cli.main(argv) == 2, argv
            assert words in capsys.readouterr().err, argv
        for argv in (["eval", "ppl", "--model", model, "--seq-len", "64"],
                     ["eval", "throughput", "--model", model, "--prompt-len", "60", "--new-tokens", "4"]):
            with pytest.raises(Loaded):  # the same runs, fitting: the loader is reached
                cli.main(argv)
    with pytest.raises(Loaded):
        cli.main(["hessians", "--model", dense, "--out", str(tmp_path / "H2"), "--seq-len", "64"])
    monkeypatch.setattr(common, "available_memory", lambda: 1 << 10)
    assert cli.main(["eval", "ppl", "--model", dense, "--seq-len", "8"]) == 2
    assert "lower --batch-size or --seq-len" in capsys.readouterr().err
    assert cli.main(["hessians", "--model", dense, "--out", str(tmp_path / "H3"), "--seq-len", "8"]) == 2
    assert "lower --n-samples, --seq-len or --batch-size" in capsys.readouterr().err


def test_a_model_whose_config_is_not_read_first_is_checked_once_loaded(tmp_path, monkeypatch, capsys):
    """A hub model's config comes with its weights (model_config is None): the same refusal, after the load."""
    from caldera.cli import evaluate, hessians
    from tests.helpers import tiny_model_dir

    model = str(tiny_model_dir(tmp_path / "tiny"))
    for mod in (evaluate, hessians):
        monkeypatch.setattr(mod, "model_config", lambda path: None)
    for argv in (["eval", "ppl", "--model", model, "--seq-len", "65"],
                 ["hessians", "--model", model, "--out", str(tmp_path / "H"), "--seq-len", "65"],
                 ["eval", "throughput", "--model", model, "--prompt-len", "60", "--new-tokens", "5"]):
        assert cli.main(argv) == 2
        assert "above the model's max_position_embeddings (64)" in capsys.readouterr().err


def test_the_model_config_is_read_from_config_json_alone(tmp_path):
    """model_config: a local folder's config (a checkpoint's too), None for a hub id or an unreadable config.json."""
    from tests.helpers import tiny_model_dir

    folder = tiny_model_dir(tmp_path / "tiny")
    assert common.model_config(str(folder)).max_position_embeddings == 64
    assert common.model_config("org/name") is None
    (folder / "config.json").write_text("{")
    assert common.model_config(str(folder)) is None


def test_the_memory_estimate_counts_the_logits_and_attention():
    """SmolLM2-135M's shapes: 100,000 tokens in one window need far more than 20 GB (what the unchecked run grew to
    before the kernel killed it); the default 512-token window well under 1 GB."""
    import types

    cfg = types.SimpleNamespace(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_attention_heads=9)
    assert common.forward_memory(cfg, 1, 100_000) > 20e9
    assert common.forward_memory(cfg, 1, 512) < 1e9
    assert common.forward_memory(cfg, 4, 512) == 4 * common.forward_memory(cfg, 1, 512)
    assert common.available_memory() > 0


def test_a_trainable_rank_above_the_methods_rank_is_refused_before_work(tmp_path, capsys):
    argv = ["compress", "--hessians", str(tmp_path / "H"), "--method", "caldera", "--param", "rank=4", "--ft-rank",
            "5", "--out", str(tmp_path / "C")]
    assert cli.main(argv) == 2
    assert "--ft-rank 5 is above the method's rank 4" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("head, option", [(h, o) for h, o, _ in NUMERIC])
def test_a_dash_dash_value_is_refused_not_parsed_as_an_empty_list(head, option, capsys):
    """Found by the options' fuzz test: Python 3.11's argparse turns ``--seq-len=--`` into [] without calling the
    option's type; every integer option refuses it."""
    with pytest.raises(SystemExit) as e:
        cli.main([*head, f"{option}=--"])
    err = capsys.readouterr().err  # (an argparse that keeps the value calls the type: "invalid int value")
    assert e.value.code == 2 and (f"argument {option}: expected an integer, got []" in err
                                  or f"argument {option}: invalid int value: '--'" in err), err
