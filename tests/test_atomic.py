"""caldera.atomic: one atomic-write mechanism, normal permissions, orphan cleanup, reproducible safetensors."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time

import pytest
import torch

from caldera import atomic
from caldera.atomic import (
    atomic_dir,
    atomic_path,
    remove_orphans,
    save_safetensors_atomic,
    sha256_file,
    tmp_sibling,
    write_atomic,
)


@pytest.fixture
def umask():
    """Set a umask for the test and restore the previous one."""
    old = os.umask(0o022)
    yield lambda m: os.umask(m)
    os.umask(old)


def _mode(p) -> int:
    return p.stat().st_mode & 0o777


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("mask,want", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_get_the_umask_permissions(tmp_path, umask, mask, want):
    umask(mask)
    p = write_atomic(tmp_path / "out" / "table.md", "x\n")
    assert p.read_text() == "x\n" and _mode(p) == want
    with atomic_path(tmp_path / "fig.png") as tmp:
        tmp.write_bytes(b"png")  # any writer that truncates keeps the mode
    assert _mode(tmp_path / "fig.png") == want
    st = save_safetensors_atomic({"a": torch.zeros(3)}, tmp_path / "t.safetensors", {"k": "v"})
    assert _mode(st) == want
    with atomic_dir(tmp_path / "ck") as d:
        (d / "sub").mkdir()
        (d / "sub" / "f.json").write_text("{}")
        os.chmod(d / "sub" / "f.json", 0o600)  # an owner-only writer (mkstemp) inside the folder
    assert _mode(tmp_path / "ck") == 0o777 & ~mask and _mode(tmp_path / "ck" / "sub" / "f.json") == want


def test_write_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    p = write_atomic(tmp_path / "a.json", "old")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_path(p) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert p.read_text() == "old" and sorted(x.name for x in tmp_path.iterdir()) == ["a.json"]
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_dir(tmp_path / "ck") as d:
            (d / "x").write_text("1")
            raise RuntimeError("boom")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.json"]


def test_atomic_dir_replaces_an_existing_folder(tmp_path):
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "stale").write_text("old")
    with atomic_dir(tmp_path / "ck") as d:
        (d / "new").write_text("new")
    assert sorted(x.name for x in (tmp_path / "ck").iterdir()) == ["new"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["ck"]


def test_safetensors_bytes_are_reproducible_and_metadata_is_one_key(tmp_path):
    t = {"b": torch.arange(6, dtype=torch.int16).reshape(2, 3), "a": torch.ones(4)}
    digests = {
        sha256_file(save_safetensors_atomic(t, tmp_path / f"{i}.safetensors", {"meta": '{"layer": 1, "x": 2}'}))
        for i in range(8)
    }
    assert len(digests) == 1
    # several keys are written in a per-process random order by safetensors: refused, with the fix
    with pytest.raises(ValueError, match="one key holding json.dumps"):
        save_safetensors_atomic(t, tmp_path / "x.safetensors", {"format": "f", "layer": "1"})


def test_orphans_of_dead_writers_are_removed_live_ones_kept(tmp_path):
    dead = _dead_pid()
    target = tmp_path / "layer_000.safetensors"
    legacy = tmp_path / f"layer_000.safetensors.tmp-{dead}"  # the old hessians/compress naming
    new_style = tmp_path / f"layer_001.json.tmp-{dead}-{atomic._HOST}-0a1b2c3d"
    live = tmp_sibling(tmp_path / "layer_002.json")  # this process: a write in flight
    other_host = tmp_path / f"layer_003.json.tmp-{dead}-ffffffff-00"
    old_other_host = tmp_path / f"layer_004.json.tmp-{dead}-ffffffff-00"
    stale_dir = tmp_path / f"ck.tmp-{dead}-{atomic._HOST}-00"
    for p in (legacy, new_style, live, other_host, old_other_host):
        p.write_text("partial")
    stale_dir.mkdir()
    (stale_dir / "model.safetensors").write_text("partial")
    day_ago = time.time() - 2 * atomic.ORPHAN_AGE_S
    os.utime(old_other_host, (day_ago, day_ago))
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("keep")

    # an atomic write cleans the orphans of its own target name only
    save_safetensors_atomic({"a": torch.zeros(1)}, target, {})
    assert not legacy.exists() and new_style.exists()

    removed = remove_orphans(tmp_path)
    assert sorted(p.name for p in removed) == sorted(p.name for p in (new_style, old_other_host, stale_dir))
    assert live.exists() and other_host.exists() and unrelated.exists() and target.exists()


def test_sha256_file_is_hashlib(tmp_path):
    data = os.urandom(3 * (1 << 20) + 17)  # more than one chunk
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_write_json_is_key_sorted_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "r.json"
    atomic.write_json(path, {"b": 1, "a": {"d": [1, 2], "c": None}, "p": tmp_path})
    assert path.read_text() == ('{\n "a": {\n  "c": null,\n  "d": [\n   1,\n   2\n  ]\n },\n "b": 1,\n "p": "'
                                f'{tmp_path}"\n}}')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    assert atomic.read_json(path) == {"a": {"c": None, "d": [1, 2]}, "b": 1, "p": str(tmp_path)}


def test_write_result_keeps_the_clock_out_of_the_result(tmp_path):
    path = tmp_path / "ppl_wiki.json"
    atomic.write_result(path, {"ppl": 12.5}, {"wall_s": 3.25})
    atomic.write_result(path, {"ppl": 12.5}, {"wall_s": 9.0})  # a rerun: the result's bytes do not move
    assert atomic.read_json(path) == {"ppl": 12.5}
    assert atomic.read_json(atomic.timing_path(path)) == {"wall_s": 9.0}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ppl_wiki.json", "ppl_wiki.timing.json"]


def test_new_folder_refuses_an_existing_path_and_names_it(tmp_path):
    from caldera.atomic import OutputExists, new_folder

    assert new_folder(tmp_path / "fresh") == tmp_path / "fresh" and not (tmp_path / "fresh").exists()
    (tmp_path / "taken").mkdir()
    with pytest.raises(OutputExists, match=r"taken already exists; remove it or choose a new folder"):
        new_folder(tmp_path / "taken")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="file already exists"):  # OutputExists is a ValueError
        new_folder(str(tmp_path / "file"))


def _guard(path, **kw):
    from caldera.atomic import guard_output

    kw.setdefault("same_kind", lambda p: (p / "marker").is_file())
    return guard_output(path, option="--out", kind="thing", **kw)


def test_guard_output_accepts_a_new_path_or_an_empty_folder(tmp_path):
    assert _guard(tmp_path / "new") == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    assert _guard(tmp_path / "empty") == tmp_path / "empty"


def test_guard_output_never_accepts_what_is_not_of_its_kind_even_with_overwrite(tmp_path):
    from caldera.atomic import OutputExists

    (tmp_path / "file").write_text("precious")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "notes.txt").write_text("precious")
    for p, what in ((tmp_path / "file", "a file"), (tmp_path / "dir", "a folder")):
        for kw in ({}, {"overwrite": True}, {"resumable": True}):
            with pytest.raises(OutputExists, match=f"--out {p} already exists and is {what} that is not a thing"):
                _guard(p, **kw)
    assert (tmp_path / "file").read_text() == "precious" and (tmp_path / "dir" / "notes.txt").is_file()


def test_guard_output_replaces_its_own_kind_only_with_overwrite_and_resumes_a_resumable_one(tmp_path):
    from caldera.atomic import OutputExists

    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "marker").write_text("")
    with pytest.raises(OutputExists, match="already holds a thing; pass --overwrite to replace it"):
        _guard(tmp_path / "old")
    assert _guard(tmp_path / "old", overwrite=True) == tmp_path / "old"
    assert _guard(tmp_path / "old", resumable=True) == tmp_path / "old"


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_guard_output_always_refuses_an_input_of_the_command(tmp_path, where):
    from caldera.atomic import OutputExists

    inp = tmp_path / "in" / "H"
    inp.mkdir(parents=True)
    (inp / "marker").write_text("")  # even an output of the same kind, with --overwrite
    out = {"same": inp, "inside": inp / "sub", "around": tmp_path / "in"}[where]
    with pytest.raises(OutputExists, match=r"the --hessians folder .*an input of this command"):
        _guard(out, inputs={"--hessians folder": inp}, overwrite=True, resumable=True)
    link = tmp_path / "link"
    link.symlink_to(inp)  # the same folder through a link
    with pytest.raises(OutputExists, match="an input of this command"):
        _guard(link, inputs={"--hessians folder": inp}, overwrite=True)
    assert _guard(tmp_path / "other", inputs={"--hessians folder": inp, "--model": None}) == tmp_path / "other"
