"""caldera.pipeline.checkpoint.provenance: the base model's weights digest, the calibration read from a Hessians
folder, the caldera version and the git commit, each the same on a rerun and ``unknown`` where it cannot be
known."""

from __future__ import annotations

import json
import subprocess

import torch
from safetensors.torch import save_file

from caldera.pipeline.checkpoint.provenance import (
    UNKNOWN,
    base_generation_config,
    caldera_commit,
    calibration_record,
    checkpoint_provenance,
    hessians_digest,
    source_commit,
    weights_digest,
)
from caldera.pipeline.hessian_files import META_KEY
from caldera.version import __version__


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def _repo(root):
    """A git checkout at ``root`` holding ``caldera/__init__.py``, committed."""
    (root / "caldera").mkdir(parents=True)
    (root / "caldera" / "__init__.py").write_text("x = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "one")
    return _git(root, "rev-parse", "HEAD")


def test_commit_of_a_checkout_with_changes_marked_and_unknown_elsewhere(tmp_path):
    """The commit checked out, ``+changes`` once the package differs from it; ``unknown`` outside a checkout and
    for a package folder that is not its checkout's top (an installed copy inside another repository)."""
    head = _repo(tmp_path / "repo")
    pkg = tmp_path / "repo" / "caldera"
    assert source_commit(tmp_path / "repo") == caldera_commit(pkg) == head and len(head) == 40
    (pkg / "__init__.py").write_text("x = 2\n")
    assert caldera_commit(pkg) == head + "+changes"
    nested = tmp_path / "repo" / "venv" / "site" / "caldera"
    nested.mkdir(parents=True)
    assert caldera_commit(nested) == UNKNOWN
    (tmp_path / "bare" / "caldera").mkdir(parents=True)
    assert source_commit(tmp_path / "bare") == caldera_commit(tmp_path / "bare" / "caldera") == UNKNOWN


def test_weights_digest_follows_the_weight_files_not_the_folder(tmp_path):
    """The same weight files in two folders: one digest; one changed byte or one more shard: another; the
    config beside them does not count; no weight file: unknown."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"weights")
        (tmp_path / name / "config.json").write_text(name)
    a = weights_digest(tmp_path / "a")
    assert a == weights_digest(tmp_path / "b") and len(a) == 64
    (tmp_path / "b" / "model.safetensors").write_bytes(b"weightz")
    assert weights_digest(tmp_path / "b") != a
    (tmp_path / "a" / "model-00002.safetensors").write_bytes(b"more")
    assert weights_digest(tmp_path / "a") != a
    (tmp_path / "c").mkdir()
    assert weights_digest(tmp_path / "c") == UNKNOWN


def _hessians(folder, digests):
    folder.mkdir()
    for li, d in enumerate(digests):
        save_file({"qkv.H": torch.eye(2)}, str(folder / f"layer_{li:03d}.safetensors"),
                  {META_KEY: json.dumps({"tensors_sha256": d})})


def test_calibration_record_from_hessians_json_and_the_layer_files(tmp_path):
    """The calibration fields of hessians.json (unknown where it lacks them) and a digest of the layer files'
    own tensor digests: another layer's Hessians give another digest; no layer file: unknown."""
    _hessians(tmp_path / "h", ["1" * 64, "2" * 64])
    summary = {"source": "wikitext2", "n_tokens": 64, "n_sequences": 4, "seq_len": 16, "seed": 0,
               "calibration_sha256": "9" * 64, "model": "m"}
    (tmp_path / "h" / "hessians.json").write_text(json.dumps(summary))
    rec = calibration_record(tmp_path / "h")
    assert {k: rec[k] for k in summary if k != "model"} == {k: v for k, v in summary.items() if k != "model"}
    _hessians(tmp_path / "g", ["1" * 64, "3" * 64])
    assert rec["hessians_sha256"] != hessians_digest(tmp_path / "g") and len(rec["hessians_sha256"]) == 64
    (tmp_path / "h" / "hessians.json").write_text(json.dumps({"n_tokens": 64}))
    rec = calibration_record(tmp_path / "h")
    assert rec["source"] == rec["seed"] == UNKNOWN and rec["n_tokens"] == 64
    (tmp_path / "e").mkdir()
    assert hessians_digest(tmp_path / "e") == UNKNOWN


def test_checkpoint_provenance_is_the_same_on_a_rerun(tmp_path):
    """Name as given, weights digest, calibration, this caldera's version; twice the same (no time, no path);
    the generation config beside the weights, byte for byte, or None."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"w")
    _hessians(tmp_path / "h", ["1" * 64])
    p = checkpoint_provenance("smollm2", tmp_path / "m", tmp_path / "h")
    assert p == checkpoint_provenance("smollm2", tmp_path / "m", tmp_path / "h")
    assert p["base_model"] == {"name": "smollm2", "weights_sha256": weights_digest(tmp_path / "m")}
    assert p["caldera_version"] == __version__ and p["calibration"] == calibration_record(tmp_path / "h")
    assert str(tmp_path) not in json.dumps(p)
    assert base_generation_config(tmp_path / "m") is None
    (tmp_path / "m" / "generation_config.json").write_bytes(b'{"a": 1}\n')
    assert base_generation_config(tmp_path / "m") == b'{"a": 1}\n'
    gone = checkpoint_provenance("org/not-cached-anywhere", "org/not-cached-anywhere", tmp_path / "h")
    assert gone["base_model"]["weights_sha256"] == UNKNOWN
