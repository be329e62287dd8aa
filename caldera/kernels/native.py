"""C kernels for E8P / E8P-RVQ4 code products on CPU through a full 8-bit codebook lookup, built at install time.

Every E8P codeword is a multiple of ¼ with entries in [−2.75, 2.75], so ``4·codebook`` is exact in int8: a
lookup ``T8`` (65536, 8) int8 of 512 KiB (:func:`int8_codebook`; checked equal to the codebook at build). The
products of :mod:`caldera.kernels.cpu` then read per 8-weight code one 8-byte row of ``T8`` (widened to float32
with two AVX2 instructions) and FMA it with 8 entries of ``x``; ``y = ¼ · s · Σ``. E8P-RVQ4 codes
``(c1 << 16) | c2`` take two lookups, ``w(c1) + w(c2)/3.45``. The per-code loop of the Numba kernels could not
be vectorised by Numba's LLVM (scalar FMAs, ≈ 5 ns per code measured); this one runs ≈ 1 ns per code on
this CPU (``caldera/kernels/README.md``). The E8P product takes four rows per pass over ``x`` (four independent
codebook reads in flight); a row's arithmetic does not depend on its group, so a thread split changes no bit.

``caldera_layer_fwd`` (:func:`fused_layer`, :class:`FusedLayer`) is a whole ``CompressedLinear`` forward in one
call: ``x ⊙ S_U`` → ``U_dᵀ`` (in-place fast Walsh–Hadamard transform of the ``2^p`` part, the K × K Hadamard
factor of :mod:`caldera.algorithm.hadamard` as a small dense product) → E8P product → factor products (float16 read with
F16C, float32, or E8P-RVQ4 codes) and ``L_ft R_ft`` → ``U_n`` → ``⊙ S_V`` → bias. Per decoded token this
replaces ≈ 10 torch calls per layer (two Kronecker-Hadamard transforms, conversions, adds) by one.

The sources, in ``c/`` beside this module (``caldera_layer.c`` the kernels, ``caldera_layer.h`` their
argument structs, ``caldera_module.c`` the CPython module, ``caldera_layer_avx2.c`` the AVX2 variant), are built
by ``setup.py`` as the optional setuptools extension ``caldera.kernels._caldera_layer`` when the package is
installed (``pip install -e .`` builds it in place, next to this file; a wheel carries it). No ``-march=native``:
``caldera_layer.c`` is compiled twice, once for the portable baseline and once with every function under
``target("avx2,fma,f16c")``, and the module picks the AVX2 variant at import when the CPU has AVX2, FMA and F16C
(:func:`isa`; :func:`select_isa` switches, for tests). Each kernel takes one argument struct of
``caldera_layer.h``, mirrored here by a :class:`ctypes.Structure` (:class:`MmArgs`, :class:`MmTArgs`,
:class:`LayerArgs`) whose field offsets and sizes must equal the ones the module reports (``LAYOUT``), and runs
with the GIL released (so :mod:`caldera.kernels.cpu` splits rows over threads as for Numba). An install without a
C compiler (or Python headers) still succeeds, as setuptools builds the extension as optional; then, at first use,
one :class:`NativeKernelWarning` says that the extension was not built and how to build it, and
:mod:`caldera.kernels.cpu` uses its Numba kernels. ``setup.py`` records the built module's sha256 beside it
(``<module file>.sha256``); the module is loaded only when its file still has that hash (:func:`build_problem`),
so a truncated or damaged build takes the same fallback, with its own warning, instead of crashing the
interpreter when it is loaded. ``$CALDERA_NO_NATIVE`` forces that fallback silently.
Reference: :func:`caldera.kernels.e8p_decode.codes_matmul_reference`.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.util
import os
import sys
import warnings

import numpy as np
import torch

from caldera.atomic import sha256_file
from caldera.kernels.factors import Factors

#: How to get the extension when it is missing (printed with the warning).
FIX = (
    "install a C compiler and the Python headers (e.g. apt install gcc python3-dev), then reinstall caldera "
    "(pip install -e . in the repository, or pip install --force-reinstall caldera); "
    "pip install -v shows the build's own warning"
)

_P, _I64, _I32, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float
#: The extension module's name.
EXT = "caldera.kernels._caldera_layer"
#: Suffix of the file ``setup.py`` writes next to the module it built: the module file's sha256.
HASH_SUFFIX = ".sha256"


class MmArgs(ctypes.Structure):
    """``caldera_mm_args`` of ``caldera_layer.h``: ``y[:, r0:r1] = x (s ⊙ Q[r0:r1])ᵀ`` from codes."""

    _fields_ = [
        *((f, _P) for f in ("x", "y", "codes", "T", "scale")),
        *((f, _I64) for f in ("B", "n", "m", "r0", "r1")),
        *((f, _I32) for f in ("width", "stages", "per_row")),
        ("inv_rs", _F),
    ]


class MmTArgs(ctypes.Structure):
    """``caldera_mm_t_args``: ``y[:, 8j0:8j1] += t (s · M)[:, 8j0:8j1]`` from the codes of M."""

    _fields_ = [
        *((f, _P) for f in ("t", "y", "codes", "T")),
        *((f, _I64) for f in ("B", "k", "m", "j0", "j1")),
        *((f, _I32) for f in ("width", "stages")),
        *((f, _F) for f in ("inv_rs", "scale")),
    ]


class LayerArgs(ctypes.Structure):
    """``caldera_layer_args``: one layer's prepared forward (:class:`FusedLayer`)."""

    _fields_ = [
        *((f, _P) for f in ("su", "sv", "Md", "Mn", "qc", "qs", "T", "Lp", "Rp", "Lft", "Rft", "bias")),
        *((f, _I64) for f in ("d", "n", "Kd", "Kn", "k", "r")),
        *((f, _I32) for f in ("qw", "q_per_row", "lr_mode", "lrw", "stages")),
        *((f, _F) for f in ("inv_rs", "ls", "rs")),
    ]


#: The C struct each mirror stands for.
MIRRORS = {"caldera_mm_args": MmArgs, "caldera_mm_t_args": MmTArgs, "caldera_layer_args": LayerArgs}


class NativeKernelWarning(RuntimeWarning):
    """The C kernels are not used (the extension was not built, or does not match this package); the Numba path
    is."""


def _warn(msg: str) -> None:
    warnings.warn(f"caldera native kernel: {msg}", NativeKernelWarning, stacklevel=3)


def mirror_layout() -> dict:
    """``{struct: {"sizeof": bytes, field: (offset, size), ...}}`` of the ctypes mirrors: what the extension's
    ``LAYOUT`` (the C structs, from ``offsetof``/``sizeof``) must equal."""
    field = lambda cls, f: (getattr(cls, f).offset, getattr(cls, f).size)
    return {n: {"sizeof": ctypes.sizeof(c), **{f: field(c, f) for f, _ in c._fields_}} for n, c in MIRRORS.items()}


def build_problem(path: str) -> str | None:
    """What is wrong with the module file ``path`` against the sha256 that ``setup.py`` recorded beside it when it
    built it (``<path>.sha256``): no record, or another sha256 (a truncated, damaged or replaced file, which would
    crash the interpreter when loaded). None: the file is the one that was built."""
    record = path + HASH_SUFFIX
    try:
        with open(record) as f:  # closed here: a handle left to the garbage collector warns (ResourceWarning)
            want = f.read().strip()
    except OSError:
        return f"no build record {record} (setup.py writes it when it builds the module)"
    got = sha256_file(path)
    if got != want:
        return f"its sha256 {got[:12]}… is not the {want[:12]}… recorded when it was built (truncated or damaged)"
    return None


def layout_mismatch(layout: dict) -> str | None:
    """What differs between the C structs' layout (``LAYOUT`` of the extension) and the ctypes mirrors, or None."""
    for name, mine in mirror_layout().items():
        if layout.get(name) != mine:
            return f"{name}: the extension's layout {layout.get(name)} is not the mirror's {mine}"
    return None


@functools.lru_cache(maxsize=1)
def _ext():
    """The extension module ``caldera.kernels._caldera_layer``; None (with one :class:`NativeKernelWarning`) when it
    was not built, is not the file that was built (:func:`build_problem`, checked before it is loaded) or does not
    match this package (:func:`layout_mismatch`)."""
    if os.environ.get("CALDERA_NO_NATIVE"):  # the switch forces the Numba fallback, silently
        return None
    if EXT not in sys.modules:  # verified before it is loaded: a damaged module can crash the interpreter
        spec = importlib.util.find_spec(EXT)
        path = getattr(spec, "origin", None)
        bad = build_problem(path) if path and os.path.isfile(path) else None
        if bad:
            _warn(f"the C extension {path} is not the file that was built ({bad}); using the slower Numba kernels. "
                  f"Rebuild it: {FIX}.")  # fmt: skip
            return None
    try:
        ext = importlib.import_module(EXT)
    except ImportError as e:
        _warn(f"the C extension caldera.kernels._caldera_layer was not built ({e}); using the slower Numba kernels. "
              f"To build it: {FIX}.")  # fmt: skip
        return None
    bad = layout_mismatch(getattr(ext, "LAYOUT", {}))
    if bad:
        _warn(f"the C extension {ext.__file__} was built from other sources ({bad}); using the slower Numba kernels. "
              f"Rebuild it: {FIX}.")  # fmt: skip
        return None
    return ext


def available() -> bool:
    """True when the C extension is built and loaded on this machine."""
    return _ext() is not None


def isa() -> str | None:
    """The variant of the C kernels in use: ``"avx2"`` (AVX2 + FMA + F16C), ``"scalar"``, or None (not built)."""
    ext = _ext()
    return None if ext is None else ext.isa()


def select_isa(name: str) -> str:
    """Run the C kernels as variant ``name`` (``"avx2"`` or ``"scalar"``) from now on; returns the previous one.
    Raises ValueError when this CPU or build lacks it (the process-wide choice is for tests and measurements)."""
    ext = _ext()
    if ext is None:
        raise RuntimeError(f"the C extension is not built; {FIX}")
    return ext.select_isa(name)


@functools.lru_cache(maxsize=1)
def int8_codebook() -> np.ndarray:
    """``4 ·`` the E8P codebook as int8 (65536, 8), C-contiguous; raises if any codeword is not exact."""
    from caldera.quantizers.e8p import lookup_on

    cb = lookup_on(torch.device("cpu")).codebook.to(torch.float32)
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
    a = MmArgs(x=_ptr(x), y=_ptr(y), codes=_ptr(codes), T=_ptr(int8_codebook()), scale=_ptr(scale), B=x.shape[0], n=n,
               m=m, r0=r0, r1=r1, width=_width(codes), stages=stages, per_row=int(scale.shape[0] > 1),
               inv_rs=inv_rs)  # fmt: skip
    _ext().codes_mm(a)


def codes_mm_t_cols(t, codes, stages, inv_rs, scale, y, j0, j1) -> None:  # noqa: PLR0913
    """``y[:, 8j0:8j1] += t (s · M)[:, 8j0:8j1]``: numpy ``t`` (B, k) float32, ``codes`` (k, m), ``y`` (B, 8m)."""
    k, m = codes.shape
    a = MmTArgs(t=_ptr(t), y=_ptr(y), codes=_ptr(codes), T=_ptr(int8_codebook()), B=t.shape[0], k=k, m=m, j0=j0, j1=j1,
                width=_width(codes), stages=stages, inv_rs=inv_rs, scale=scale)  # fmt: skip
    _ext().codes_mm_t(a)


class FusedLayer:
    """One layer's argument struct for ``caldera_layer_fwd`` (:class:`LayerArgs`), prepared once (:func:`fused_layer`).

    The C call computes, for ``h`` (B, d) float32 rows, ``y = ((H_n-rotate of h̃ Qᵀ + (h̃ Rᵀ) Lᵀ [+ (h̃ R_ftᵀ)
    L_ftᵀ]) ⊙ S_V) + bias`` with ``h̃ = U_dᵀ (h ⊙ S_U)``: the whole of ``CompressedLinear.forward`` in one call,
    reading Q (and quantized factors) as codes and 16-bit factors as float16; the transforms are the Kronecker
    Hadamard ``U_n = (M_K ⊗ H_{2^p}) / √(K 2^p)`` of :mod:`caldera.algorithm.hadamard` (in-place fast Walsh–Hadamard
    transform for the ``2^p`` part, the K × K factor as a small dense product). Holds references to every
    tensor it points at. Its struct holds raw pointers into those tensors, so a copy or a pickle of it is None
    (not prepared): the copy of a ``CompressedLinear`` prepares its own call from its own tensors.
    """

    def __init__(self, d: int, n: int, k: int, r: int, keep: tuple, args: LayerArgs):
        self.d, self.n, self.k, self.r = d, n, k, r
        self._keep = keep
        self._args = bytes(args)  # the struct's bytes: what the extension copies at each call
        self._fwd = _ext().layer_fwd

    def __deepcopy__(self, memo):
        return None

    def __reduce__(self):
        return _unprepared, ()

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """``y`` (B, n) float32 for ``h`` (B, d) float32 contiguous CPU."""
        B = h.shape[0]
        y = torch.empty(B, self.n, dtype=torch.float32)
        work = torch.empty(B * (self.d + self.k + self.r) + max(self.n, self.d), dtype=torch.float32)
        self._fwd(self._args, B, h.data_ptr(), y.data_ptr(), work.data_ptr())
        return y


def _unprepared() -> None:
    """What a pickled :class:`FusedLayer` loads as."""
    return None


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
    or None, ``bias`` (n,) or None. Raises when the C extension was not built."""
    from caldera.algorithm.hadamard import factor_matrix, hadamard_factor
    from caldera.kernels.e8p_decode import SUPPORTED

    if _ext() is None:
        raise RuntimeError(f"the C extension is not built; the fused layer needs it. {FIX}")
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
    T = torch.from_numpy(int8_codebook())
    args = LayerArgs(
        su=hold(su), sv=hold(sv), Md=hold(Md), Mn=hold(Mn), qc=hold(qc), qs=hold(qs), T=hold(T), Lp=hold(Lp),
        Rp=hold(Rp), Lft=hold(Lft), Rft=hold(Rft), bias=hold(b), d=d, n=n, Kd=Kd, Kn=Kn, k=k, r=r,
        qw=qc.element_size(), q_per_row=int(qs.numel() > 1), lr_mode=mode, lrw=lrw, stages=stages, inv_rs=inv_rs,
        ls=ls, rs=rs,
    )  # fmt: skip
    return FusedLayer(d, n, k, r, tuple(keep), args)
