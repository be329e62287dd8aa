"""C kernels for E8P / E8P-RVQ4 code products on CPU through a full 8-bit codebook table, built on first use.

Every E8P codeword is a multiple of ¼ with entries in [−2.75, 2.75], so ``4·codebook`` is exact in int8: a
table ``T8`` (65536, 8) int8 of 512 KiB (:func:`lut_table`; checked equal to the codebook at build). The
products of :mod:`caldera.kernels.cpu` then read per 8-weight code one 8-byte row of ``T8`` (widened to float32
with two AVX2 instructions) and FMA it with 8 entries of ``x``; ``y = ¼ · s · Σ``. E8P-RVQ4 codes
``(c1 << 16) | c2`` take two lookups, ``w(c1) + w(c2)/3.45``. The per-code loop of the Numba kernels could not
be vectorised by Numba's LLVM (scalar FMAs, ≈ 5 ns per code measured); this one runs ≈ 1 ns per code on
this CPU (``kernels/README.md``). The E8P product takes four rows per pass over ``x`` (four independent
table reads in flight); a row's arithmetic does not depend on its group, so a thread split changes no bit.

``caldera_layer_fwd`` (:func:`fused_layer`, :class:`FusedLayer`) is a whole ``CompressedLinear`` forward in one
call: ``x ⊙ S_U`` → ``U_dᵀ`` (in-place fast Walsh–Hadamard transform of the ``2^p`` part, the K × K Hadamard
factor of :mod:`caldera.hadamard` as a small dense product) → E8P product → factor products (float16 read with
F16C, float32, or E8P-RVQ4 codes) and ``L_ft R_ft`` → ``U_n`` → ``⊙ S_V`` → bias. Per decoded token this
replaces ≈ 10 torch calls per layer (two Kronecker-Hadamard transforms, conversions, adds) by one.

The source, ``kernels/cpu/caldera_layer.c`` of the repository (shipped in the package as
``caldera/kernels/csrc/``), is compiled once per machine with the system C compiler (``$CC`` or ``cc``,
``-O3 -march=native``, at most ``$CALDERA_CC_TIMEOUT`` = 120 s) into ``kernels/`` of the asset cache
(``$CALDERA_CACHE`` or ``~/.cache/caldera``) and loaded with :mod:`ctypes` (which releases the GIL during a call,
so :mod:`caldera.kernels.cpu` splits rows over threads as for Numba). Nothing is loaded unverified
(:func:`_lib`): the folder must be the user's own and not group/world-writable (created 0700); the library is
named by a key over the source, the compiler's path and ``--version``, the flags, the CPU's model and flags and
the machine; its sha256 and size are recorded at build time and checked on the open file before ``dlopen``. A
planted, truncated or replaced library is rebuilt; a failed or timed-out build is remembered (``.failed``) so
later processes fall back at once. Whenever the C kernels are not used (no compiler, failed build, untrusted
folder) one :class:`NativeKernelWarning` says why and :mod:`caldera.kernels.cpu` uses its Numba kernels;
``$CALDERA_NO_NATIVE`` forces that fallback silently. Without AVX2 the same source compiles to a scalar loop.
Reference: :func:`caldera.kernels.tables.codes_matmul_reference`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import stat
import subprocess
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from caldera.kernels.factors import Factors

_SRC_PATH = Path(__file__).resolve().parent / "csrc" / "caldera_layer.c"  # csrc → the repository's kernels/cpu
_FLAGS = ["-O3", "-march=native", "-shared", "-fPIC", "-std=c99"]
_SYMBOLS = ("caldera_codes_mm", "caldera_codes_mm_t", "caldera_layer_fwd")
_STEM = "caldera_layer_"


class NativeKernelWarning(RuntimeWarning):
    """The C kernels were not loaded (or a cached build was replaced); the Numba path is used."""


def _warn(msg: str) -> None:
    warnings.warn(f"caldera native kernel: {msg}", NativeKernelWarning, stacklevel=3)


def _timeout_s() -> float:
    raw = os.environ.get("CALDERA_CC_TIMEOUT", "120")
    try:
        t = float(raw)
    except ValueError:
        raise ValueError(f"$CALDERA_CC_TIMEOUT={raw!r}: expected a number of seconds, e.g. 120") from None
    if not t > 0:
        raise ValueError(f"$CALDERA_CC_TIMEOUT={raw!r}: expected a positive number of seconds, e.g. 120")
    return t


def _cpu_id() -> str:
    """The lines of ``/proc/cpuinfo`` that change what ``-march=native`` emits: model name and CPU flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    keep = {}
    for line in lines:
        field = line.split(":", 1)[0].strip()
        if field in ("model name", "flags", "Features", "CPU part") and field not in keep:
            keep[field] = line
    return "\n".join(keep.values()) or platform.processor()


def cache_dir() -> Path:
    """Folder of the built kernels: ``kernels/`` of the asset cache (``$CALDERA_CACHE`` or ``~/.cache/caldera``)."""
    from caldera.cache import cache_dir as cache_root

    return Path(cache_root()) / "kernels"


def _secure_dir(d: Path) -> str | None:
    """Create ``d`` 0700; the reason it cannot be trusted (symlink, other owner, group/world-writable) or None."""
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        d.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(d)
    except OSError as e:
        return f"cannot create the cache folder {d}: {e}"
    if not stat.S_ISDIR(st.st_mode):
        return f"the cache folder {d} is not a plain folder (a symlink?); remove it"
    if st.st_uid != os.getuid():
        return f"the cache folder {d} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); remove it"
    if st.st_mode & 0o022:
        return f"the cache folder {d} is group- or world-writable (mode {oct(st.st_mode & 0o777)}); run chmod 700 {d}"
    return None


def _compiler() -> tuple[str, str] | str:
    """``(path, cc --version output)`` of ``$CC`` or ``cc``, or the reason there is none."""
    name = os.environ.get("CC") or "cc"
    cc = shutil.which(name) or (None if os.environ.get("CC") else shutil.which("gcc"))  # a set $CC is not replaced
    if not cc:
        return f"no C compiler ({name!r} not found; set $CC)"
    try:
        r = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=min(_timeout_s(), 30))
    except (OSError, subprocess.SubprocessError) as e:
        return f"{cc} --version failed: {e}"
    return os.path.realpath(cc), r.stdout + r.stderr


class Build:
    """One build key's files: the record ``<stem>.sha256`` (``"<sha256> <size>"`` of the library, written at build
    time), the library ``<stem>-<sha256[:16]>.so`` it names, and ``<stem>.failed`` after a failed build."""

    def __init__(self, folder: Path, key: str, cc: str, source: bytes):
        self.folder, self.key, self.cc, self.source = folder, key, cc, source
        stem = f"{_STEM}{key[:24]}"
        self.record = folder / f"{stem}.sha256"
        self.failed = folder / f"{stem}.failed"
        self._stem = stem

    def library(self, sha256: str) -> Path:
        """The library whose content has this sha256 (named by it: a rebuild never reuses a loaded file's name,
        which ``dlopen`` would answer with the library already loaded)."""
        return self.folder / f"{self._stem}-{sha256[:16]}.so"

    def recorded(self) -> tuple[Path, str, int] | None:
        """``(library, sha256, size)`` from the record, or None when there is no readable record."""
        try:
            sha, size = self.record.read_text().split()
            return self.library(sha), sha, int(size)
        except (OSError, ValueError):
            return None


def build_key(source: bytes, cc: str, cc_version: str) -> str:
    """sha256 of everything that changes the binary: source, compiler path and version, flags, CPU, machine."""
    parts = [source.decode(), cc, cc_version, *_FLAGS, _cpu_id(), platform.machine()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def current_build() -> Build | str:
    """The :class:`Build` for this machine and compiler, or the reason the kernels cannot be built here."""
    folder = cache_dir()
    bad = _secure_dir(folder)
    if bad:
        return bad
    found = _compiler()
    if isinstance(found, str):
        return found
    cc, version = found
    try:
        source = _SRC_PATH.read_bytes()
    except OSError as e:
        return f"the kernel source {_SRC_PATH} cannot be read ({e}); reinstall caldera"
    return Build(folder, build_key(source, cc, version), cc, source)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _sweep(folder: Path) -> None:
    """Remove the build folders (``build-<pid>-*``) of processes that no longer run (killed mid-build)."""
    for p in folder.glob("build-*"):
        try:
            pid = int(p.name.split("-")[1])
            os.kill(pid, 0)
            continue  # still running
        except (IndexError, ValueError, ProcessLookupError):
            pass
        except PermissionError:
            continue
        shutil.rmtree(p, ignore_errors=True)


def _compile(b: Build) -> str | None:
    """Compile into a private temp folder and move the library and its sha256 record into place; the reason on
    failure (also written to ``b.failed``, so later processes fall back at once)."""
    _sweep(b.folder)
    tmp = Path(tempfile.mkdtemp(prefix=f"build-{os.getpid()}-", dir=b.folder))
    try:
        src, out = tmp / "caldera_layer.c", tmp / "caldera_layer.so"
        src.write_bytes(b.source)
        try:
            r = subprocess.run([b.cc, *_FLAGS, str(src), "-o", str(out)], capture_output=True, text=True,
                               timeout=_timeout_s())  # fmt: skip
            why = None if r.returncode == 0 else f"{b.cc} exited {r.returncode}: {(r.stderr or r.stdout)[-2000:]}"
        except subprocess.TimeoutExpired:
            why = f"{b.cc} did not finish in {_timeout_s():g} s ($CALDERA_CC_TIMEOUT)"
        except OSError as e:
            why = f"{b.cc} could not run: {e}"
        if why is None:
            os.chmod(out, 0o700)
            data = out.read_bytes()
            sha = hashlib.sha256(data).hexdigest()
            os.replace(out, b.library(sha))
            _write_atomic(b.record, f"{sha} {len(data)}\n".encode())  # last: it only names a file in place
            return None
        note = f"build of {_SRC_PATH.name} failed: {why}\ncompiler: {b.cc}\nflags: {' '.join(_FLAGS)}\n"
        _write_atomic(b.failed, note.encode())
        return why
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _dlopen(b: Build) -> ctypes.CDLL | str:
    """Load the library named by the record after checking, on the open file, that it is a regular file of ours,
    not group/world-writable, whose size and sha256 equal the record; the reason when not."""
    rec = b.recorded()
    if rec is None:
        return f"no build record {b.record}"
    so, want, size = rec
    try:
        fd = os.open(so, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        return f"cannot open {so}: {e}"
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            return f"{so} is not a private regular file of yours (uid {st.st_uid}, mode {oct(st.st_mode & 0o777)})"
        h = hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
        if st.st_size != size or h.hexdigest() != want:
            return f"{so} does not match its build record (sha256 or size differ: corrupt, truncated or replaced)"
        try:
            lib = ctypes.CDLL(str(so))
        except OSError as e:
            return f"{so} could not be loaded: {e}"
        now = os.stat(so)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):  # swapped between the check and dlopen
            return f"{so} was replaced while it was being loaded"
    missing = [s for s in _SYMBOLS if not hasattr(lib, s)]
    return f"{so} lacks the symbols {missing}" if missing else lib


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    """The verified C library, building it when needed; None (with one :class:`NativeKernelWarning`) otherwise.

    Nothing is loaded that this user did not build: the folder is ours and 0700, and the library's sha256 and size
    must equal the record written when it was built. A corrupt or planted library is rebuilt (one warning); a
    failed or timed-out build is remembered in ``<stem>.failed`` (delete it to retry) so later processes do not
    recompile."""
    if os.environ.get("CALDERA_NO_NATIVE"):  # the switch forces the Numba fallback, silently
        return None
    b = current_build()
    if isinstance(b, str):
        _warn(f"{b}; using the slower Numba kernels")
        return None
    if b.failed.exists():
        first = b.failed.read_text(errors="replace").splitlines()[:1]
        _warn(f"an earlier build failed ({first[0] if first else '?'}); using the slower Numba kernels. "
              f"Delete {b.failed} to retry.")  # fmt: skip
        return None
    replaced = None
    if b.record.exists():
        got = _dlopen(b)
        if not isinstance(got, str):
            return _declare(got)
        replaced = got
        rec = b.recorded()
        b.record.unlink(missing_ok=True)
        if rec is not None:
            rec[0].unlink(missing_ok=True)
    why = _compile(b)
    if why:
        _warn(f"{why}; remembered in {b.failed} (delete it to retry); using the slower Numba kernels")
        return None
    got = _dlopen(b)
    if isinstance(got, str):
        _write_atomic(b.failed, f"the fresh build did not verify: {got}\n".encode())
        _warn(f"{got}; remembered in {b.failed}; using the slower Numba kernels")
        return None
    if replaced:
        _warn(f"{replaced}; it was not loaded, and was rebuilt")
    return _declare(got)


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    p, i, f = ctypes.c_void_p, ctypes.c_long, ctypes.c_float
    ci = ctypes.c_int
    lib.caldera_codes_mm.argtypes = [p, i, p, ci, i, i, p, ci, f, p, ci, p, i, i]
    lib.caldera_codes_mm.restype = None
    lib.caldera_codes_mm_t.argtypes = [p, i, i, p, ci, i, p, ci, f, f, p, i, i]
    lib.caldera_codes_mm_t.restype = None
    L = ctypes.c_long
    lib.caldera_layer_fwd.argtypes = [L, p, p, p, L, L, p, p, L, p, L, p, p, ci, p, ci, p, ci, L, p, p, ci, ci, f, f, f,
                                      L, p, p, p]  # fmt: skip
    lib.caldera_layer_fwd.restype = None
    return lib


def available() -> bool:
    """True when the C kernels compiled (or were cached) and loaded on this machine."""
    return _lib() is not None


@functools.lru_cache(maxsize=1)
def lut_table() -> np.ndarray:
    """``4 ·`` the E8P codebook as int8 (65536, 8), C-contiguous; raises if any codeword is not exact."""
    from caldera.quantizers.e8p import tables_on

    cb = tables_on(torch.device("cpu")).codebook.to(torch.float32)
    t8 = torch.round(cb * 4)
    if not torch.equal(t8 / 4, cb) or t8.abs().max() > 127:
        raise RuntimeError("E8P codebook is not a set of multiples of 1/4 in int8 range; the LUT kernel cannot hold it")
    return np.ascontiguousarray(t8.to(torch.int8).numpy())


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def _width(codes: np.ndarray) -> int:
    if codes.dtype.itemsize not in (2, 4, 8):
        raise ValueError(f"codes: the C kernel reads 2-, 4- or 8-byte integer codes, got {codes.dtype}")
    return codes.dtype.itemsize


def codes_mm_rows(x, codes, stages, inv_rs, scale, y, r0, r1) -> None:  # noqa: PLR0913 - mirrors the C call
    """``y[:, r0:r1] = x (s ⊙ Q[r0:r1])ᵀ``: numpy ``x`` (B, 8m) float32, ``codes`` (n, m), ``scale`` (1,)|(n,)."""
    n, m = codes.shape
    _lib().caldera_codes_mm(
        _ptr(x), x.shape[0], _ptr(codes), _width(codes), n, m, _ptr(lut_table()), stages, inv_rs,
        _ptr(scale), int(scale.shape[0] > 1), _ptr(y), r0, r1,
    )  # fmt: skip


def codes_mm_t_cols(t, codes, stages, inv_rs, scale, y, j0, j1) -> None:  # noqa: PLR0913
    """``y[:, 8j0:8j1] += t (s · M)[:, 8j0:8j1]``: numpy ``t`` (B, k) float32, ``codes`` (k, m), ``y`` (B, 8m)."""
    k, m = codes.shape
    _lib().caldera_codes_mm_t(
        _ptr(t), t.shape[0], k, _ptr(codes), _width(codes), m, _ptr(lut_table()), stages, inv_rs, scale, _ptr(y),
        j0, j1,
    )  # fmt: skip


class FusedLayer:
    """One layer's arguments to ``caldera_layer_fwd``, prepared once (:func:`fused_layer`).

    The C call computes, for ``h`` (B, d) float32 rows, ``y = ((H_n-rotate of h̃ Qᵀ + (h̃ Rᵀ) Lᵀ [+ (h̃ R_ftᵀ)
    L_ftᵀ]) ⊙ S_V) + bias`` with ``h̃ = U_dᵀ (h ⊙ S_U)``: the whole of ``CompressedLinear.forward`` in one call,
    reading Q (and quantized factors) as codes and 16-bit factors as float16; the transforms are the Kronecker
    Hadamard ``U_n = (M_K ⊗ H_{2^p}) / √(K 2^p)`` of :mod:`caldera.hadamard` (in-place fast Walsh–Hadamard
    transform for the ``2^p`` part, the K × K factor as a small dense product). Holds references to every
    tensor it points at.
    """

    def __init__(self, d: int, n: int, k: int, r: int, keep: tuple, args: tuple):
        self.d, self.n, self.k, self.r = d, n, k, r
        self._keep = keep
        self._args = args

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """``y`` (B, n) float32 for ``h`` (B, d) float32 contiguous CPU."""
        B = h.shape[0]
        y = torch.empty(B, self.n, dtype=torch.float32)
        work = torch.empty(B * (self.d + self.k + self.r) + max(self.n, self.d), dtype=torch.float32)
        _lib().caldera_layer_fwd(B, h.data_ptr(), y.data_ptr(), work.data_ptr(), *self._args)
        return y


def _code_tensor(c: torch.Tensor) -> torch.Tensor:
    """Codes in a 2-, 4- or 8-byte integer dtype (the widths the C kernels read), contiguous."""
    if c.element_size() not in (2, 4, 8) or c.dtype == torch.int16:
        c = c.to(torch.int32)
    return c.contiguous()


def fused_layer(  # noqa: PLR0913 - one argument per stored tensor of the layer
    Q_codes: torch.Tensor,
    Q_scale: torch.Tensor,
    S_U: torch.Tensor | None,
    S_V: torch.Tensor | None,
    factors: Factors | None,
    ft: tuple[torch.Tensor, torch.Tensor] | None,
    bias: torch.Tensor | None,
) -> FusedLayer:
    """Prepare :class:`FusedLayer` for a layer with ``Q_codes`` (n, d/8) E8P, ``Q_scale`` () or (n, 1), RHT signs
    ``S_U`` (d,), ``S_V`` (n,) (None: no RHT), the frozen low-rank part ``factors``
    (:class:`caldera.kernels.factors.Factors`: float16/float32 ``L`` (n, k), ``R`` (k, d), or codes of ``Lᵀ``
    (k, n/8) and ``R`` (k, d/8) with scalar scales; None: no factors), ``ft`` = ``(L_ft (n, r), R_ft (r, d))``
    or None, ``bias`` (n,) or None. Raises when the C kernels did not build."""
    from caldera.hadamard import factor_matrix, hadamard_factor
    from caldera.kernels.tables import SUPPORTED

    lib = _lib()
    if lib is None:
        raise RuntimeError("the C kernels did not build (no C compiler?); the fused layer needs them")
    n, m = Q_codes.shape
    d = 8 * m
    keep: list[torch.Tensor] = []

    def hold(t: torch.Tensor | None) -> int:
        if t is None:
            return 0
        keep.append(t)
        return t.data_ptr()

    qc = _code_tensor(Q_codes)
    qs = Q_scale.detach().float().reshape(-1).contiguous()
    if qs.numel() not in (1, n):
        raise ValueError(f"Q_scale: expected a scalar or ({n}, 1), got {qs.numel()} values")
    su = sv = Md = Mn = None
    Kd = Kn = 1
    if S_U is not None:
        su, sv = S_U.detach().float().contiguous(), S_V.detach().float().contiguous()
        Kd, Kn = hadamard_factor(d)[0], hadamard_factor(n)[0]
        if Kd > 1:
            Md = factor_matrix(Kd, True, True, torch.float32, torch.device("cpu"))
        if Kn > 1:
            Mn = factor_matrix(Kn, True, False, torch.float32, torch.device("cpu"))
    mode, k, Lp, Rp, lrw, stages, inv_rs, ls, rs = 0, 0, None, None, 2, 1, 1.0, 0.0, 0.0
    if factors is not None and factors.L_codes is None:
        L, R = factors.L.detach(), factors.R.detach()
        dt = torch.float16 if L.dtype == torch.float16 else torch.float32
        mode, k = (1 if dt == torch.float16 else 2), L.shape[1]
        Lp, Rp = L.to(dt).contiguous(), R.to(dt).contiguous()
    elif factors is not None:
        stages, res = SUPPORTED[factors.quantizer]
        Lc, Rc = _code_tensor(factors.L_codes), _code_tensor(factors.R_codes)
        if Lc.element_size() != Rc.element_size():
            Lc, Rc = Lc.to(torch.int64), Rc.to(torch.int64)
        mode, k, Lp, Rp, lrw = 3, Lc.shape[0], Lc, Rc, Lc.element_size()
        inv_rs, ls, rs = 1.0 / res, float(factors.L_scale), float(factors.R_scale)
    r, Lft, Rft = 0, None, None
    if ft is not None:
        Lft, Rft = ft[0].detach().float().contiguous(), ft[1].detach().float().contiguous()
        r = Lft.shape[1]
    b = None if bias is None else bias.detach().float().contiguous()
    T = torch.from_numpy(lut_table())
    args = (
        d, n, hold(su), hold(sv), Kd, hold(Md), Kn, hold(Mn), hold(qc), qc.element_size(), hold(qs),
        int(qs.numel() > 1), hold(T), mode, k, hold(Lp), hold(Rp), lrw, stages, inv_rs, ls, rs, r, hold(Lft),
        hold(Rft), hold(b),
    )  # fmt: skip
    return FusedLayer(d, n, k, r, tuple(keep), args)
