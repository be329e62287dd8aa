"""The native kernel cache loads only what this user built and recorded (issue 21 item 1).

Each test points ``$CALDERA_CACHE`` at a fresh folder and clears ``native._lib``'s cache before and after, so the
rest of the suite gets the real library back.
"""

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from caldera.kernels import native

CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CALDERA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CALDERA_NO_NATIVE", raising=False)
    monkeypatch.delenv("CALDERA_CC_TIMEOUT", raising=False)
    native._lib.cache_clear()
    yield tmp_path / "cache" / "kernels"
    native._lib.cache_clear()


def _load():
    """``native._lib()`` afresh, with the NativeKernelWarning messages it gave."""
    native._lib.cache_clear()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        lib = native._lib()
    return lib, [str(x.message) for x in w if issubclass(x.category, native.NativeKernelWarning)]


def _fake_cc(tmp_path, body):
    """A compiler that logs every call to ``cc.log``, answers ``--version``, then runs ``body``."""
    log = tmp_path / "cc.log"
    cc = tmp_path / "fakecc"
    cc.write_text(f'#!/bin/sh\necho "$@" >> {log}\nif [ "$1" = --version ]; then echo fakecc 1.0; exit 0; fi\n{body}\n')
    cc.chmod(0o755)
    return cc, log


def _builds(log):
    return [line for line in log.read_text().splitlines() if line != "--version"] if log.exists() else []


def _compile_so(tmp_path, c_source, name):
    src = tmp_path / f"{name}.c"
    src.write_text(c_source)
    out = tmp_path / f"{name}.so"
    subprocess.run([CC, "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
    return out


POISON = textwrap.dedent(
    """
    #include <stdio.h>
    #include <stdlib.h>
    __attribute__((constructor)) static void planted(void) {
      FILE *f = fopen(getenv("POISON_FLAG"), "w"); if (f) { fputs("ran", f); fclose(f); }
    }
    void caldera_codes_mm(void) {}
    void caldera_codes_mm_t(void) {}
    void caldera_layer_fwd(void) {}
    """
)


@needs_cc
def test_builds_into_a_private_folder_with_a_record(cache):
    lib, msgs = _load()
    assert lib is not None and msgs == []
    b = native.current_build()
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    so, sha, size = b.recorded()
    assert so.read_bytes().__len__() == size and hashlib.sha256(so.read_bytes()).hexdigest() == sha
    lib2, msgs2 = _load()  # second process: loads the verified file, builds nothing
    assert lib2 is not None and msgs2 == [] and not list(cache.glob("build-*"))


@needs_cc
@pytest.mark.parametrize("record", ["none", "wrong"])
def test_planted_library_is_never_loaded(cache, tmp_path, monkeypatch, record):
    flag = tmp_path / "constructor_ran"
    monkeypatch.setenv("POISON_FLAG", str(flag))
    b = native.current_build()
    planted = _compile_so(tmp_path, POISON, "poison")
    if record == "none":  # under the old, computable name and under a name of the new form, without a record
        shutil.copy(planted, b.folder / f"{b.record.stem}.so")
        shutil.copy(planted, b.library("0" * 64))
    else:  # a record naming it, with a hash that is not the file's
        shutil.copy(planted, b.library("0" * 64))
        b.record.write_text(f"{'0' * 64} {planted.stat().st_size}\n")
    lib, msgs = _load()
    assert not flag.exists(), "the planted library's constructor ran"
    assert lib is not None and b.recorded()[1] != "0" * 64  # built from the real source
    if record == "none":
        assert msgs == []
    else:
        assert len(msgs) == 1 and "was rebuilt" in msgs[0] and "does not match its build record" in msgs[0]


@needs_cc
@pytest.mark.parametrize("compiler", ["real", "failing"])
def test_truncated_library_falls_back_without_a_crash(cache, tmp_path, compiler):
    assert _load()[0] is not None
    b = native.current_build()
    so = b.recorded()[0]
    data = so.read_bytes()
    # The record still holds the full build's hash. Written as a new file, not truncated in place: this process
    # has the library mapped, and truncating a mapped .so kills the process with SIGBUS when it next runs code from
    # it (at interpreter exit, which CI saw as exit 135 after every test had passed).
    half = so.with_suffix(".half")
    half.write_bytes(data[: len(data) // 2])
    os.replace(half, so)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import warnings; warnings.simplefilter('always')\nfrom caldera.kernels import native\n"
    if compiler == "failing":  # the rebuild fails too: the process must still run, on the Numba path
        code += "native._compile = lambda b: 'cc exited 1: forced'\n"
    code += "print('available', native.available())\n"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    if compiler == "real":
        assert "available True" in r.stdout and "was rebuilt" in r.stderr
    else:
        assert "available False" in r.stdout and "exited 1: forced" in r.stderr


@needs_cc
def test_library_without_the_symbols_is_not_used(cache, tmp_path):
    b = native.current_build()
    empty = _compile_so(tmp_path, "int unrelated(void) { return 1; }\n", "empty")
    data = empty.read_bytes()  # a consistent record: only the symbol check can refuse it
    shutil.copy(empty, b.library(hashlib.sha256(data).hexdigest()))
    b.record.write_text(f"{hashlib.sha256(data).hexdigest()} {len(data)}\n")
    lib, msgs = _load()
    assert lib is not None and hasattr(lib, "caldera_layer_fwd")
    assert len(msgs) == 1 and "lacks the symbols" in msgs[0]


@needs_cc
def test_fresh_build_without_the_symbols_is_remembered(cache, tmp_path, monkeypatch):
    parse_out = 'out=""; while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done\n'
    cc, log = _fake_cc(
        tmp_path, parse_out + f'echo "int x;" > {tmp_path}/e.c && {CC} -shared -fPIC {tmp_path}/e.c -o "$out"'
    )
    monkeypatch.setenv("CC", str(cc))
    lib, msgs = _load()
    assert lib is None and len(msgs) == 1 and "lacks the symbols" in msgs[0]
    lib, msgs = _load()
    assert lib is None and "earlier build failed" in msgs[0] and len(_builds(log)) == 1


@pytest.mark.parametrize("body, reason", [("exit 1", "exited 1"), ("exec sleep 30", "did not finish in 1 s")])
def test_failed_build_is_remembered(cache, tmp_path, monkeypatch, body, reason):
    cc, log = _fake_cc(tmp_path, body)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("CALDERA_CC_TIMEOUT", "1")
    lib, msgs = _load()
    assert lib is None and len(msgs) == 1 and reason in msgs[0]
    b = native.current_build()
    assert reason in b.failed.read_text()
    for _ in range(2):  # later processes: no compiler run, one warning naming the marker
        lib, msgs = _load()
        assert lib is None and len(msgs) == 1 and "earlier build failed" in msgs[0] and str(b.failed) in msgs[0]
    assert len(_builds(log)) == 1
    assert not list(cache.glob("build-*"))


def test_temp_folder_of_a_killed_build_is_swept(cache, tmp_path, monkeypatch):
    cc, log = _fake_cc(tmp_path, "exec sleep 60")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CC": str(cc), "CALDERA_CACHE": str(cache.parent)}
    p = subprocess.Popen([sys.executable, "-c", "from caldera.kernels import native; native.available()"], env=env,
                         start_new_session=True)  # fmt: skip
    try:
        for _ in range(600):  # wait for the build to start (its compiler call is logged)
            if _builds(log):
                break
            time.sleep(0.1)
        assert _builds(log), "the build never started"
        stale = list(cache.glob("build-*"))
        assert len(stale) == 1
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    assert stale[0].exists()  # kill -9 left it
    fail, _ = _fake_cc(tmp_path, "exit 1")
    monkeypatch.setenv("CC", str(fail))
    _load()  # the next build sweeps folders of dead processes
    assert not stale[0].exists() and not list(cache.glob("build-*"))


def test_untrusted_folder_is_refused(cache):
    cache.mkdir(parents=True)
    cache.chmod(0o777)
    lib, msgs = _load()
    assert lib is None and len(msgs) == 1 and "group- or world-writable" in msgs[0]


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_folder_of_another_user_is_refused(cache):
    cache.mkdir(parents=True, mode=0o700)
    os.chown(cache, 65534, 65534)
    lib, msgs = _load()
    assert lib is None and len(msgs) == 1 and "owned by uid 65534" in msgs[0]


def test_key_covers_compiler_version_cpu_flags_and_source(monkeypatch):
    base = native.build_key(b"src", "/usr/bin/cc", "gcc 12")
    assert native.build_key(b"src", "/usr/bin/cc", "gcc 13") != base
    assert native.build_key(b"src2", "/usr/bin/cc", "gcc 12") != base
    assert native.build_key(b"src", "/usr/local/bin/cc", "gcc 12") != base
    monkeypatch.setattr(native, "_cpu_id", lambda: "model name : X\nflags : fpu sse2")
    a = native.build_key(b"src", "/usr/bin/cc", "gcc 12")
    monkeypatch.setattr(native, "_cpu_id", lambda: "model name : X\nflags : fpu sse2 avx2")
    assert native.build_key(b"src", "/usr/bin/cc", "gcc 12") != a
    monkeypatch.setattr(native, "_FLAGS", [*native._FLAGS, "-ffast-math"])
    assert native.build_key(b"src", "/usr/bin/cc", "gcc 12") != a


def test_cpu_id_holds_the_flags_line():
    if not Path("/proc/cpuinfo").exists():
        pytest.skip("no /proc/cpuinfo")
    text = Path("/proc/cpuinfo").read_text()
    if "\nflags" not in text:
        pytest.skip("no flags line")
    assert "flags" in native._cpu_id() and "model name" in native._cpu_id()


def test_source_ships_inside_the_package():
    shipped = native._SRC_PATH  # caldera/kernels/csrc/ (symlink) → kernels/cpu/
    assert shipped.is_file() and shipped.read_bytes() == (ROOT / "kernels/cpu/caldera_layer.c").read_bytes()


def test_missing_source_falls_back_with_one_warning(cache, monkeypatch, tmp_path):
    monkeypatch.setattr(native, "_SRC_PATH", tmp_path / "nosuch.c")
    lib, msgs = _load()
    assert lib is None and len(msgs) == 1 and "nosuch.c cannot be read" in msgs[0] and "reinstall" in msgs[0]


def test_compiler_named_by_cc_that_does_not_exist_is_a_warning(cache, monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    lib, msgs = _load()
    assert lib is None and len(msgs) == 1 and "'no-such-compiler-xyz' not found; set $CC" in msgs[0]
