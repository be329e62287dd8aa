"""``CompressedLinear``: a drop-in ``nn.Linear`` replacement that stores ``W ≈ unrotate(Q + L R)`` compressed.

Stored (``state_dict``, all tensors, no pickle):

==============  ===================================  ===================================================
name            shape / dtype                        meaning
==============  ===================================  ===================================================
``Q_codes``     (n, d/b) smallest lossless int dtype  the backbone's integer codes, exactly (E8P: uint16)
``Q_scale``     () or (n, 1) float32                 ``Q = Q_scale · quantizer.dequantize(Q_codes)``; a
                                                     quantizer may declare another shape (per group)
``Q_<extra>``   as the quantizer declares            further tensors of the quantizer's storage declaration
                                                     (``stored_extras``: a per-matrix codebook, say);
                                                     ``Q = quantizer.decode(Q_codes, Q_scale, extras)``
``Q_dense``     (n, d) float16 or float32             instead of codes/scale: a method without Q codes (a
                                                     float Q), counted at 16 / 32 bits per weight
``S_U``         (d,) int8 ±1 (float32 if trainable)  input-side RHT signs (absent without RHT)
``S_V``         (n,) int8 ±1 (float32 if trainable)  output-side RHT signs (absent without RHT)
``L_codes``     (k − r, n/b)                         codes of ``Lᵀ`` (quantized factors), ``L_scale`` ()
``R_codes``     (k − r, d/b)                         codes of ``R``, ``R_scale`` ()
``L_16``        (n, k − r) float16                   16-bit factors instead of codes (``R_16`` (k − r, d))
``L_ft``        (n, r) Parameter (bf16/fp16/fp32)    trainable first ``r = ft_rank`` columns of L
``R_ft``        (r, d) Parameter                     trainable first ``r`` rows of R
``bias``        (n,)                                 optional
==============  ===================================  ===================================================

Forward, entirely in the RHT basis and in float32 (the weight in the original basis is never formed)::

    x̃ = rotate_input(x)                     # (x ⊙ S_U) U_d         (skipped without RHT)
    ỹ = x̃ Qᵀ + (x̃ Rᵀ) Lᵀ + (x̃ R_ftᵀ) L_ftᵀ
    y = unrotate_output(ỹ) (+ bias)        # (ỹ U_nᵀ) ⊙ S_V        (skipped without RHT)

and the result is cast back to ``x``'s dtype.

**Inference kernels.** When no gradient is needed, the input has at most ``KERNEL_MAX_ROWS`` rows (tokens)
and a kernel of :mod:`caldera.kernels` reads this layer's codes (E8P backbone; 16-bit or E8P-RVQ4 factors),
the layer runs straight from the codes with nothing dequantized or cached: memory stays at the compressed
size. On CPU (``"native"`` backend) the whole forward — both randomized Hadamard transforms, the E8P product,
the factor products, ``L_ft R_ft`` and the bias — is one C call of :mod:`caldera.kernels.native`, prepared
once per layer; without a C compiler the Numba products (``"numba"``) with the transforms in Python. On CUDA,
the Triton kernel. ``kernel="auto"`` (the default) takes the faster path as measured (``caldera/kernels/README.md``):
the fused C layer on CPU, the Triton kernel on CUDA, and the reference path where
only the Numba products exist (they are slower than a cached fp32 matmul). ``kernel="kernel"`` uses a kernel
whenever one applies; ``kernel="reference"`` never does. The fused C layer runs on one thread.

**Reference path.** ``Q`` and the quantized factors are obtained from the codes by
a codebook lookup (``quantizer.dequantize``) and, with ``cache_dequantized=True`` (the default), cached as
non-persistent float32 buffers on first use: they are never saved, move with ``.to()``, are dropped by
:meth:`clear_cache` and by ``load_state_dict``. The cache costs 32 bits per weight of memory (like a dense
fp32 layer) and saves the lookup on every call; pass ``cache_dequantized=False`` to keep memory at the
compressed size and dequantize on every forward instead.

The forward computes in float32 whatever the input dtype and returns the input's dtype, so there is no need
to call ``.half()``/``.to(dtype)`` on the module; doing so would also convert its floating buffers (scales,
16-bit factors) and lose precision.

Unlike the authors' ``CalderaQuantizedLinear`` (authors-code.md §5, whose forward never checks its
``hadamard`` flag), a decomposition without RHT (``dec.rht is None``) is supported: the transforms are
simply not applied.

The storage helpers (codes, scales, quantizer names) are in :mod:`caldera.nn.format`, the choice of kernel and
the calls into :mod:`caldera.kernels` in :mod:`caldera.nn.dispatch`; this module is the layer itself.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from caldera.algorithm.decomposition import Decomposition
from caldera.algorithm.hadamard import RHT
from caldera.nn import dispatch
from caldera.nn.dispatch import KERNEL_MAX_ROWS, KERNELS
from caldera.nn.format import (
    _FT_DTYPES,
    DENSE_Q_FORMATS,
    META_VERSION,
    dequantize,
    encode_decomposition,
    factor_codes_dtype,
    q_extra_names,
    resolve_quantizer,
)


class CompressedLinear(nn.Module):
    """Linear layer ``y = x Ŵᵀ (+ b)`` with ``Ŵ = unrotate(Q + L R)`` kept compressed (module docstring).

    Build with :meth:`from_decomposition` (after compression) or :meth:`from_tensors` (loading a checkpoint);
    :meth:`metadata` plus ``state_dict()`` is everything needed to rebuild it.
    """

    def __init__(
        self, meta: dict[str, Any], tensors: dict[str, Tensor], *, cache_dequantized: bool = True, kernel: str = "auto"
    ):
        super().__init__()
        if kernel not in KERNELS:
            raise ValueError(f"kernel={kernel!r}; accepted: {', '.join(KERNELS)}")
        self.kernel = kernel
        self.meta = dict(meta)
        self.in_features = int(meta["in_features"])
        self.out_features = int(meta["out_features"])
        self.cache_dequantized = cache_dequantized
        n, d = self.out_features, self.in_features
        need = ["Q_dense"] if meta.get("q_format") in DENSE_Q_FORMATS else ["Q_codes", "Q_scale",
                                                                             *q_extra_names(meta)]
        if meta["rht"]:
            need += ["S_U", "S_V"]
        k_q = int(meta["rank"]) - int(meta["ft_rank"])
        if meta["lr_format"] == "quantized" and k_q > 0:
            need += ["L_codes", "L_scale", "R_codes", "R_scale"]
        elif meta["lr_format"] in ("float16", "float32") and k_q > 0:
            need += ["L_16", "R_16"]
        if int(meta["ft_rank"]) > 0:
            need += ["L_ft", "R_ft"]
        if meta.get("bias"):
            need += ["bias"]
        missing = [k for k in need if k not in tensors]
        if missing:
            raise ValueError(f"CompressedLinear ({n}x{d}): missing tensors {missing}")
        trainable = {"L_ft", "R_ft"} | ({"S_U", "S_V"} if meta.get("signs_trainable") else set())
        for k in need:
            t = tensors[k]
            if k in trainable:
                self.register_parameter(k, nn.Parameter(t.clone() if t.requires_grad else t, requires_grad=True))
            else:
                self.register_buffer(k, t)
        if self.dense_q:
            if tuple(self.Q_dense.shape) != (n, d):
                raise ValueError(f"Q_dense has shape {tuple(self.Q_dense.shape)}; expected ({n}, {d})")
        elif tuple(self.Q_codes.shape[:1]) != (n,):
            raise ValueError(f"Q_codes has shape {tuple(self.Q_codes.shape)}; expected ({n}, ...)")
        if meta["rht"] and (self.S_U.shape != (d,) or self.S_V.shape != (n,)):
            raise ValueError(
                f"S_U/S_V have shapes {tuple(self.S_U.shape)}/{tuple(self.S_V.shape)}; expected ({d},)/({n},)"
            )
        for name in ("_Q_cache", "_L_cache", "_R_cache"):
            self.register_buffer(name, None, persistent=False)
        self._rht_key: tuple | None = None
        self._rht: RHT | None = None
        self._invalidate_kernels()

    # ------------------------------------------------------------------------------------------ building

    @classmethod
    def from_decomposition(
        cls,
        dec: Decomposition,
        bias: Tensor | None = None,
        *,
        ft_rank: int = 0,
        ft_dtype: torch.dtype = torch.bfloat16,
        q_quantizer: str | None = None,
        lr_quantizer: str | None = None,
        cache_dequantized: bool = True,
        kernel: str = "auto",
        check: bool = True,
    ) -> "CompressedLinear":
        """Store a :class:`~caldera.algorithm.decomposition.Decomposition` compressed.

        ``ft_rank`` splits the first ``ft_rank`` columns of L / rows of R into trainable ``L_ft``/``R_ft``
        parameters of ``ft_dtype`` (dequantized values); the rest stays as codes. Quantizer names are
        inferred from ``dec.config`` (``q_bits``/``l_bits``/``r_bits``, or RTN's ``bits``) unless given.
        ``check`` verifies that the codes reproduce ``dec.Q`` / ``dec.L`` / ``dec.R`` (rel. 1e-5).

        A decomposition without Q codes (``dec.Q_codes is None``: a method whose Q fits no registered quantizer)
        stores ``dec.Q`` itself as ``Q_dense``: float16 when that is exact, else float32 (16 / 32 bits per
        weight in :meth:`bit_widths` and :meth:`storage_bits`); it runs on the reference path.
        """
        meta, tensors = encode_decomposition(dec, bias, ft_rank=ft_rank, ft_dtype=ft_dtype, q_quantizer=q_quantizer,
                                             lr_quantizer=lr_quantizer, check=check)
        return cls(meta, tensors, cache_dequantized=cache_dequantized, kernel=kernel)

    @classmethod
    def from_tensors(cls, meta: dict[str, Any], tensors: dict[str, Tensor], **kw: Any) -> "CompressedLinear":
        """Rebuild from :meth:`metadata` and ``state_dict()`` (keys without the module prefix)."""
        if int(meta.get("version", -1)) != META_VERSION:
            raise ValueError(
                f"CompressedLinear metadata version {meta.get('version')!r}; this library reads "
                f"{META_VERSION}; re-run `caldera compress`"
            )
        return cls(meta, tensors, **kw)

    def metadata(self) -> dict[str, Any]:
        return dict(self.meta)

    # ------------------------------------------------------------------------------------------ fine-tuning

    def make_signs_trainable(self) -> "CompressedLinear":
        """Turn ``S_U``/``S_V`` into float32 ``nn.Parameter``s (RHT fine-tuning). Requires an RHT."""
        if not self.meta["rht"]:
            raise ValueError("this CompressedLinear has no RHT (decomposed with rht=False): no signs to train")
        if self.meta["signs_trainable"]:
            return self
        for name in ("S_U", "S_V"):
            t = getattr(self, name).float()
            delattr(self, name)
            self.register_parameter(name, nn.Parameter(t, requires_grad=True))
        self.meta["signs_trainable"] = True
        self._rht_key = None
        self._invalidate_kernels()
        return self

    # ------------------------------------------------------------------------------------------ decoding

    @property
    def rank(self) -> int:
        return int(self.meta["rank"])

    @property
    def dense_q(self) -> bool:
        """Q is stored as a float tensor (``Q_dense``), not as codes."""
        return self.meta.get("q_format") in DENSE_Q_FORMATS

    def _q_device(self) -> torch.device:
        return (self.Q_dense if self.dense_q else self.Q_codes).device

    @property
    def ft_rank(self) -> int:
        return int(self.meta["ft_rank"])

    def clear_cache(self) -> None:
        self._Q_cache = self._L_cache = self._R_cache = None

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self.clear_cache()
        self._rht_key = None
        self._invalidate_kernels()
        super()._load_from_state_dict(*args, **kwargs)

    def dequantized_Q(self) -> Tensor:
        """Q (n, d) float32 in the RHT basis (cached when ``cache_dequantized``)."""
        if self.dense_q:
            return self.Q_dense.float()
        c = self._Q_cache
        if c is not None and c.device == self.Q_codes.device and c.dtype == torch.float32:
            return c
        extras = {name[2:]: getattr(self, name) for name in q_extra_names(self.meta)}
        Q = dequantize(self.meta["q_quantizer"], self.Q_codes, self.Q_scale, self.meta["q_codes_dtype"], extras)
        if self.cache_dequantized:
            self._Q_cache = Q
        return Q

    def quantized_factors(self) -> tuple[Tensor, Tensor] | None:
        """The frozen (non-trainable) part of the factors: L (n, k − r), R (k − r, d) float32, or None."""
        if self.rank - self.ft_rank == 0:
            return None
        c = self._L_cache
        if c is not None and c.device == self._q_device() and c.dtype == torch.float32:
            return c, self._R_cache
        if self.meta["lr_format"] == "quantized":
            L = dequantize(self.meta["l_quantizer"], self.L_codes, self.L_scale,
                           factor_codes_dtype(self.meta, "l")).T.contiguous()
            R = dequantize(self.meta["r_quantizer"], self.R_codes, self.R_scale, factor_codes_dtype(self.meta, "r"))
        else:
            L, R = self.L_16.float(), self.R_16.float()
        if self.cache_dequantized:
            self._L_cache, self._R_cache = L, R
        return L, R

    def rht(self) -> RHT | None:
        if not self.meta["rht"]:
            return None
        key = (self.S_U, self.S_V)
        if self._rht_key is None or self._rht_key[0] is not key[0] or self._rht_key[1] is not key[1]:
            self._rht = RHT(
                S_U=self.S_U if self.S_U.is_floating_point() else self.S_U.float(),
                S_V=self.S_V if self.S_V.is_floating_point() else self.S_V.float(),
            )
            self._rht_key = key
        return self._rht

    def rotated_weight(self) -> Tensor:
        """``Q + L R (+ L_ft R_ft)`` (n, d) float32, RHT basis (for checks; the forward never forms it)."""
        W = self.dequantized_Q().clone()
        f = self.quantized_factors()
        if f is not None:
            W += f[0] @ f[1]
        if self.ft_rank:
            W += self.L_ft.float() @ self.R_ft.float()
        return W

    def weight_reconstruction(self) -> Tensor:
        """Ŵ (n, d) float32 in the original basis (dense; for checks and reports only)."""
        W = self.rotated_weight()
        r = self.rht()
        return r.unrotate_W(W) if r is not None else W

    def to_linear(self) -> nn.Linear:
        """A dense ``nn.Linear`` (float32, frozen) with ``weight = Ŵ`` = :meth:`weight_reconstruction` and the
        same bias: the same function as :meth:`forward` up to float rounding, without the per-call RHT.
        For evaluation on CPUs, where the two Kronecker-Hadamard transforms per call cost ~30 % of a
        forward; the storage savings are of course gone."""
        has_bias = "bias" in self._buffers
        # built on the meta device: no random initialisation of a weight that is overwritten anyway
        lin = nn.Linear(self.in_features, self.out_features, bias=has_bias, device="meta")
        lin.weight = nn.Parameter(self.weight_reconstruction().float().contiguous(), requires_grad=False)
        if has_bias:
            lin.bias = nn.Parameter(self.bias.float().clone(), requires_grad=False)
        return lin

    def kernel_backend(self, x: Tensor) -> str | None:
        """The :mod:`caldera.kernels` backend the forward uses for ``x`` (None: the reference path)."""
        if self.kernel == "reference" or x.numel() > KERNEL_MAX_ROWS * self.in_features:
            return None
        if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters())):
            return None
        if self._backend is False:
            self._backend = self._choose_backend()
        return self._backend

    def _choose_backend(self) -> str | None:
        """The backend for this layer's tensors and ``kernel`` setting (:func:`caldera.nn.dispatch.choose_backend`)."""
        return dispatch.choose_backend(self)

    def _invalidate_kernels(self) -> None:
        """Forget the backend choice and the prepared C call (tensors moved, replaced or reloaded)."""
        self._backend: str | None | bool = False  # False: not chosen yet
        self._fused = None
        self._fused_key: tuple = ()

    def _apply(self, fn, recurse: bool = True):  # .to(), .cpu(), .cuda(), .float(), ...: tensors replaced
        out = super()._apply(fn, recurse)
        self._invalidate_kernels()
        return out

    def _fused_layer(self):
        """The prepared C call of this layer (:func:`caldera.nn.dispatch.fused_call`). Rebuilt after ``.to()``, a
        reload, or an in-place update of a trainable tensor (``L_ft``/``R_ft``, real-valued signs: keyed on their
        version counters); frozen buffers are only replaced through those paths."""
        key = tuple(p._version for p in self._parameters.values())
        if self._fused is None or self._fused_key != key:
            self._fused = dispatch.fused_call(self)
            self._fused_key = key
        return self._fused

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"input has last dimension {x.shape[-1]}; this layer expects {self.in_features}")
        dtype = x.dtype
        backend = self.kernel_backend(x)
        if backend == "native":  # the whole layer in one C call (RHTs, Q and factor products, bias)
            y = self._fused_layer()(x.reshape(-1, self.in_features).float().contiguous())
            return y.reshape(*x.shape[:-1], self.out_features).to(dtype)
        h = x.float()
        r = self.rht()
        if r is not None:
            h = r.rotate_input(h)
        if backend is not None:
            lead = h.shape[:-1]
            y = dispatch.codes_product(self, h.reshape(-1, self.in_features), backend)
            y = y.reshape(*lead, self.out_features)
        else:
            y = h @ self.dequantized_Q().T
            f = self.quantized_factors()
            if f is not None:
                y = y + (h @ f[1].T) @ f[0].T
        if self.ft_rank:
            y = y + (h @ self.R_ft.float().T) @ self.L_ft.float().T
        if r is not None:
            y = r.unrotate_output(y)
        if "bias" in self._buffers:
            y = y + self.bias.float()
        return y.to(dtype)

    def cuda_graph(self, batch: int = 1, dtype: torch.dtype = torch.float16, warmup: int = 3):
        """This layer's forward for ``(batch, in_features)`` inputs of ``dtype``, captured once as a CUDA graph and
        replayed per call (a decode step's kernel launches paid once, at capture). Returns ``run(x)``: it copies
        ``x`` into the graph's static input, replays the graph and returns its static output ``(batch,
        out_features)`` of ``dtype``, which the next call overwrites (clone it to keep it). Inference only (run
        under ``torch.no_grad()``); the layer's tensors must stay in place while the graph is used (a ``.to()`` or
        a reload needs a new graph). ``ValueError`` unless the layer is on a CUDA device."""
        dev = self._q_device()
        if dev.type != "cuda":
            raise ValueError(f"cuda_graph: the layer is on {dev}; a CUDA graph needs the layer on a CUDA device")
        x_static = torch.zeros(batch, self.in_features, dtype=dtype, device=dev)
        stream = torch.cuda.Stream(dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.no_grad(), torch.cuda.stream(stream):
            for _ in range(warmup):  # compiles the kernels and prepares the caches outside the capture
                self(x_static)
        torch.cuda.current_stream(dev).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            y_static = self(x_static)

        def run(x: Tensor) -> Tensor:
            x_static.copy_(x)
            graph.replay()
            return y_static

        return run

    # ------------------------------------------------------------------------------------------ accounting

    def bit_widths(self) -> dict[str, Any]:
        """Nominal bits per weight of Q and of the quantized factors (16 for fp16, 32 for fp32 factors)."""
        if self.dense_q:
            b_q: float = 16.0 if self.meta["q_format"] == "float16" else 32.0
        else:
            b_q = resolve_quantizer(self.meta["q_quantizer"]).bits_per_weight
        fmt = self.meta["lr_format"]
        if fmt == "quantized":
            b_lr: float | None = resolve_quantizer(self.meta["l_quantizer"]).bits_per_weight
        elif fmt in ("float16", "float32"):
            b_lr = 16.0 if fmt == "float16" else 32.0
        else:
            b_lr = None
        b_ft = _FT_DTYPES[self.meta["ft_dtype"]].itemsize * 8 if self.ft_rank else 16
        return {"b_q": b_q, "b_lr": b_lr, "b_ft": b_ft}

    def storage_bits(self) -> int:
        """Bits to store this layer: codes + scales + packed (1-bit) signs, via
        :func:`caldera.bits.storage_bits`, plus the Q quantizer's declared extras at their dtype's width, the
        trainable ``L_ft``/``R_ft`` at their dtype's width (and 32-bit signs when they are trainable)."""
        from caldera.bits import storage_bits

        n, d, r = self.out_features, self.in_features, self.ft_rank
        w = self.bit_widths()
        k_q = self.rank - r
        num_scales = (0 if self.dense_q else self.Q_scale.numel()) + (
            self.L_scale.numel() + self.R_scale.numel() if self.meta["lr_format"] == "quantized" and k_q else 0
        )
        sign_bits = (32 if self.meta["signs_trainable"] else 1) if self.meta["rht"] else 0
        bits = storage_bits(
            n,
            d,
            k_q,
            math.ceil(w["b_q"]),
            math.ceil(w["b_lr"]) if k_q else None,
            sign_bits=sign_bits,
            num_scales=num_scales,
        )
        extras = sum(getattr(self, name).numel() * getattr(self, name).element_size() * 8
                     for name in q_extra_names(self.meta))
        return bits + extras + r * (n + d) * int(w["b_ft"])

    def tensor_bits(self) -> int:
        """Bits of the tensors actually stored (``state_dict`` payload, e.g. int8 signs, uint16 codes)."""
        return sum(t.numel() * t.element_size() * 8 for t in self.state_dict().values())

    def extra_repr(self) -> str:
        m = self.meta
        lr = f"rank={m['rank']} ({m['lr_format']})" if m["rank"] else "rank=0"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, Q={m['q_quantizer'] or m['q_format']}, "
            f"{lr}, "
            f"ft_rank={m['ft_rank']}, rht={m['rht']}"
        )


