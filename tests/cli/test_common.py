"""What the commands share (caldera.cli.common): argument parsing, model paths, one-line errors, the output
lock, log lines above progress bars."""

from __future__ import annotations

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
