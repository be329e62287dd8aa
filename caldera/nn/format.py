"""The stored form of a :class:`~caldera.nn.compressed_linear.CompressedLinear`: integer codes in their smallest
dtype, scales, ±1 signs, 16-bit factors, and the quantizer names that decode them (the table of the layer's
module docstring).

:func:`narrow_codes` stores codes losslessly in the smallest integer dtype, :func:`dequantize` turns codes and a
scale back into float32 through the quantizer registry, and the ``_infer_*`` helpers read a decomposition's
config to name the quantizers that produced its codes. Nothing here runs a forward.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from caldera.algorithm.decomposition import Decomposition
from caldera.quantizers.base import Quantizer

#: Version of the layer metadata (:meth:`CompressedLinear.metadata`); a checkpoint of another version is refused.
META_VERSION = 1
#: dtypes of the trainable factors ``L_ft`` / ``R_ft``, by name
#: ``meta["q_format"]`` of a Q stored as a float tensor (``Q_dense``) instead of codes
DENSE_Q_FORMATS = ("float16", "float32")
_FT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype name {name!r}")
    return dt


def narrow_codes(codes: Tensor) -> Tensor:
    """The same integer values in the smallest dtype that holds them (uint8 … uint32, int32, int64)."""
    if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool:
        raise ValueError(f"codes must be an integer tensor, got {codes.dtype}")
    if codes.numel() == 0:
        return codes.to(torch.uint8)
    lo, hi = int(codes.min()), int(codes.max())
    for dt in (torch.uint8, torch.int8, torch.uint16, torch.int16, torch.uint32, torch.int32):
        info = torch.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return codes.to(dt).contiguous()
    return codes.to(torch.int64).contiguous()


def resolve_quantizer(name: str) -> Quantizer:
    """Quantizer instance for a registry name (``caldera.quantizers.get_quantizer``). A name this package does
    not know is looked up again after the registered methods are imported (this package's and those of the
    ``caldera.methods`` entry points), whose modules register their own quantizers."""
    from caldera.quantizers import get_quantizer

    try:
        return get_quantizer(name)
    except ValueError:
        from caldera.methods import registered_methods

        registered_methods(strict=False)
        return get_quantizer(name)


def q_extra_names(meta: dict, quantizer: Quantizer | None = None) -> list[str]:
    """State-dict names (``Q_<name>``) of the tensors the layer's Q quantizer stores beside codes and scale
    (:meth:`~caldera.quantizers.base.Quantizer.stored_extras`); none for a float Q."""
    if meta.get("q_format") in DENSE_Q_FORMATS or not meta.get("q_quantizer"):
        return []
    q = quantizer or resolve_quantizer(meta["q_quantizer"])
    return [f"Q_{k}" for k in q.stored_extras(int(meta["out_features"]), int(meta["in_features"]))]


def quantizer_name_for_bits(bits: int) -> str:
    from caldera.quantizers import quantizer_for_bits

    return quantizer_for_bits(int(bits)).name


def dequantize(name: str, codes: Tensor, scale: Tensor, codes_dtype: str | None = None,
               extras: dict[str, Tensor] | None = None) -> Tensor:
    """The float32 matrix ``quantizer(name).decode(codes, scale, extras)`` (by default ``scale · dequantize(codes)``;
    codes restored to ``codes_dtype`` first; ``extras`` keyed by the quantizer's own names, without ``Q_``)."""
    q = resolve_quantizer(name)
    c = codes.to(_dtype(codes_dtype)) if codes_dtype else codes
    return q.decode(c, scale.float(), extras or {}).float()


def _infer_q_quantizer(dec: Decomposition) -> str:
    if dec.q_quantizer is not None:
        return dec.q_quantizer
    cfg = dec.config or {}
    if "q_bits" in cfg:
        return quantizer_name_for_bits(cfg["q_bits"])
    if dec.method == "rtn" and "bits" in cfg:
        from caldera.quantizers import UniformRTN

        return UniformRTN(int(cfg["bits"]), per_row=bool(cfg.get("per_row", True))).name
    raise ValueError(
        f"cannot tell which quantizer produced the Q codes of a {dec.method!r} decomposition (its config has "
        "no 'q_bits'); pass q_quantizer=<registry name> to CompressedLinear.from_decomposition"
    )


def _infer_lr_quantizer(dec: Decomposition, which: str) -> str:
    cfg = dec.config or {}
    key = f"{which}_bits"
    if key in cfg:
        return quantizer_name_for_bits(cfg[key])
    raise ValueError(
        f"cannot tell which quantizer produced the {which.upper()} codes of a {dec.method!r} decomposition "
        f"(its config has no {key!r}); pass lr_quantizer=<registry name>"
    )


def _close(a: Tensor, b: Tensor) -> bool:
    tol = 1e-5 * float(b.abs().max().clamp_min(1e-30))
    return a.shape == b.shape and float((a.float() - b.float()).abs().max()) <= tol if a.numel() else True


def _signs_tensor(s: Tensor) -> Tensor:
    """±1 signs as int8 (exact); anything else (fine-tuned real signs) as float32."""
    s = s.detach().float().cpu()
    return s.to(torch.int8) if bool(((s == 1) | (s == -1)).all()) else s.contiguous()


def _integer_dtype(name: object) -> torch.dtype | None:
    """The integer torch dtype called ``name``, or None."""
    dt = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dt, torch.dtype) or dt.is_floating_point or dt.is_complex or dt == torch.bool:
        return None
    return dt


def _code_dtype(num_codes: int | None) -> torch.dtype | None:
    """The dtype :func:`narrow_codes` stores codes ``0 .. num_codes - 1`` in at most (None: no bound known)."""
    if num_codes is None or num_codes < 1:
        return None
    return narrow_codes(torch.tensor([0, num_codes - 1])).dtype


def factor_codes_dtype(meta: dict, which: str) -> Any:
    """The dtype the ``which`` (``"l"`` or ``"r"``) factor's codes were made in: ``lr_codes_dtype``, R's own
    ``r_codes_dtype`` where its codes need a wider dtype than L's (e.g. 2-bit L, 4-bit R)."""
    if which == "r" and meta.get("r_codes_dtype") is not None:
        return meta["r_codes_dtype"]
    return meta.get("lr_codes_dtype")


def _check_codes(t: Tensor, quantizer: str, rows: int, features: int, codes_dtype: object) -> str | None:
    """Codes of ``quantizer`` for a (rows, features) matrix, stored in an integer dtype, whose values are codes
    of that quantizer and fit ``codes_dtype`` (the dtype they were made in)."""
    q = resolve_quantizer(quantizer)
    want = (rows, features // q.block_size)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        return f"has dtype {_dtype_name(t.dtype)}; {quantizer} codes are stored in an integer dtype"
    if features % q.block_size or tuple(t.shape) != want:
        return f"has shape {tuple(t.shape)}; {quantizer} codes of a {rows}x{features} matrix have shape {want}"
    dt = _integer_dtype(codes_dtype)
    if dt is None:
        return f"is read as codes of dtype {codes_dtype!r}, which is not an integer dtype"
    widest = _code_dtype(q.num_codes)
    if widest is not None and t.dtype.itemsize > widest.itemsize:
        return (f"has dtype {_dtype_name(t.dtype)}; {quantizer} codes (0 .. {q.num_codes - 1}) are stored in the "
                f"smallest integer dtype that holds them, at most {_dtype_name(widest)}")
    from caldera.quantizers.e8p import check_codes

    top = torch.iinfo(dt).max + 1 if q.num_codes is None else min(q.num_codes, torch.iinfo(dt).max + 1)
    try:
        check_codes(t, f"{quantizer} codes ({codes_dtype})", top)
    except ValueError as e:
        return f"holds invalid codes ({e})"
    return None


def _check_scale(t: Tensor, quantizer: str, rows: int, features: int) -> str | None:
    """A float32 scale of a shape the quantizer declares for a (rows, features) matrix (``scale_shapes``):
    finite and not negative."""
    if t.dtype != torch.float32:
        return f"has dtype {_dtype_name(t.dtype)}; scales are stored as float32"
    shapes = [tuple(int(x) for x in sh) for sh in resolve_quantizer(quantizer).scale_shapes(rows, features)]
    if tuple(t.shape) not in shapes:
        return (f"has shape {tuple(t.shape)}; {quantizer} scales of a {rows}x{features} matrix have shape "
                f"{' or '.join(map(str, shapes))}")
    if t.device.type == "meta" or t.numel() == 0:
        return None
    if not bool(torch.isfinite(t).all()) or bool((t < 0).any()):
        return "holds negative or non-finite values; scales are finite and positive"
    return None


def _check_zero_scale(scale: Tensor, codes: Tensor | None, quantizer: str) -> str | None:
    """A scale is 0 only where the writer quantized zeros (an all-zero matrix, or an all-zero row under a
    per-row scale): the codes there are all the quantizer's code of 0."""
    if codes is None or scale.device.type == "meta" or codes.device.type == "meta" or bool((scale != 0).all()):
        return None
    q = resolve_quantizer(quantizer)
    zero_code = int(q.quantize(torch.zeros(1, q.block_size)).reshape(-1)[0])
    c = codes.to(torch.int64)
    if scale.ndim == 0:
        rows = torch.ones(c.shape[0], dtype=torch.bool)
    elif scale.ndim == 2 and scale.shape == (c.shape[0], 1):
        rows = scale[:, 0] == 0
    else:
        return "is 0 in places; a scale per block is positive"
    if bool((c[rows] != zero_code).any()):
        return ("is 0 where the codes are not those of an all-zero matrix (a scale is 0 only for all-zero rows, "
                "which decode to 0 whatever the codes); scales are positive")
    return None


def stored_tensor_problem(meta: dict, tensors: dict[str, Tensor]) -> tuple[str, str] | None:
    """``(tensor name, what is wrong)`` for the first stored tensor of a layer (:meth:`CompressedLinear.metadata`
    plus ``state_dict``) whose dtype, shape or values do not match the scheme its metadata describes (module
    docstring's table), else None: codes of the named quantizer in its code range and the dtype they were made
    in, float32 scales of a shape the quantizer declares, finite and positive, the quantizer's declared extras of
    their shape and dtype, ±1 RHT signs (any finite nonzero value once they are trainable), factors and a
    float Q of the shapes and dtypes the metadata names. Values are not checked on the meta device."""
    n, d = int(meta["out_features"]), int(meta["in_features"])
    k, r = int(meta["rank"]), int(meta["ft_rank"])
    kq = k - r

    def expect(name: str, shape: tuple[int, ...], dtype: object) -> str | None:
        t = tensors.get(name)
        if t is None:
            return None
        if tuple(t.shape) != shape:
            return f"has shape {tuple(t.shape)}; expected {shape} (out_features {n}, in_features {d}, rank {k}, " \
                   f"ft_rank {r})"
        if dtype == "float":  # any floating dtype (a bias keeps the dtype of the layer it came from)
            return None if t.is_floating_point() else f"has dtype {_dtype_name(t.dtype)}; expected a floating dtype"
        if isinstance(dtype, str) and _dtype_name(t.dtype) != dtype:
            return f"has dtype {_dtype_name(t.dtype)}; the metadata says {dtype}"
        return None

    checks: list[tuple[str, Any]] = []
    if meta.get("q_format") in DENSE_Q_FORMATS:
        checks.append(("Q_dense", lambda: expect("Q_dense", (n, d), meta["q_format"])))
    else:
        checks.append(("Q_codes", lambda: _check_codes(tensors["Q_codes"], meta["q_quantizer"], n, d,
                                                       meta.get("q_codes_dtype"))))
        checks.append(("Q_scale", lambda: _check_scale(tensors["Q_scale"], meta["q_quantizer"], n, d)
                       or _check_zero_scale(tensors["Q_scale"], tensors.get("Q_codes"), meta["q_quantizer"])))
        for ex, (shape, dt) in resolve_quantizer(meta["q_quantizer"]).stored_extras(n, d).items():
            checks.append((f"Q_{ex}", lambda ex=ex, shape=shape, dt=dt: expect(
                f"Q_{ex}", tuple(int(x) for x in shape), _dtype_name(dt))))
    if meta.get("rht"):
        for name, size in (("S_U", d), ("S_V", n)):
            checks.append((name, lambda name=name, size=size: expect(name, (size,), None) or _check_signs(
                tensors[name], bool(meta.get("signs_trainable")))))
    fmt = meta.get("lr_format")
    if kq > 0 and fmt == "quantized":
        for name, which, feats in (("L", "l_quantizer", n), ("R", "r_quantizer", d)):
            checks.append((f"{name}_codes", lambda name=name, which=which, feats=feats: _check_codes(
                tensors[f"{name}_codes"], meta[which], kq, feats, factor_codes_dtype(meta, which[0]))))
            checks.append((f"{name}_scale", lambda name=name, which=which, feats=feats: _check_scale(
                tensors[f"{name}_scale"], meta[which], kq, feats)
                or _check_zero_scale(tensors[f"{name}_scale"], tensors.get(f"{name}_codes"), meta[which])))
    elif kq > 0:
        checks.append(("L_16", lambda: expect("L_16", (n, kq), fmt)))
        checks.append(("R_16", lambda: expect("R_16", (kq, d), fmt)))
    if r > 0:
        if meta.get("ft_dtype") not in _FT_DTYPES:
            return "L_ft", f"is stored with ft_dtype {meta.get('ft_dtype')!r}; accepted: {sorted(_FT_DTYPES)}"
        checks.append(("L_ft", lambda: expect("L_ft", (n, r), meta["ft_dtype"])))
        checks.append(("R_ft", lambda: expect("R_ft", (r, d), meta["ft_dtype"])))
    if meta.get("bias"):
        checks.append(("bias", lambda: expect("bias", (n,), "float")))
    for name, check in checks:
        if name not in tensors:
            continue  # a missing tensor: CompressedLinear names it
        problem = check()
        if problem:
            return name, problem
    return None


def _check_signs(t: Tensor, trainable: bool) -> str | None:
    """RHT signs: int8 ±1 (what :func:`_signs_tensor` writes for ±1 values); trainable signs: float32, any
    finite nonzero value (fine-tuning moves them; a zero sign zeroes a whole row or column of the transform, a
    non-finite one poisons it)."""
    if trainable:
        if t.dtype != torch.float32:
            return f"has dtype {_dtype_name(t.dtype)}; trainable signs are float32"
        if t.device.type != "meta" and not bool((torch.isfinite(t) & (t != 0)).all()):
            bad = t[~torch.isfinite(t) | (t == 0)]
            return (f"holds {bad.numel()} zero or non-finite values (e.g. {float(bad[0]):g}); trainable signs are "
                    "finite and nonzero (a zero sign zeroes a whole row or column of the transform, a non-finite "
                    "one poisons it)")
        return None
    if t.dtype != torch.int8:
        return (f"has dtype {_dtype_name(t.dtype)}; RHT signs are stored as int8 ±1 (float32 only when trainable: "
                "signs_trainable)")
    if t.device.type != "meta" and not bool(((t == 1) | (t == -1)).all()):
        bad = t[(t != 1) & (t != -1)]
        return f"holds {bad.numel()} values other than ±1 (e.g. {float(bad[0]):g}); RHT signs are ±1"
    return None


def encode_decomposition(
    dec: Decomposition,
    bias: Tensor | None = None,
    *,
    ft_rank: int = 0,
    ft_dtype: torch.dtype = torch.bfloat16,
    q_quantizer: str | None = None,
    lr_quantizer: str | None = None,
    check: bool = True,
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """The stored form ``(meta, tensors)`` of a :class:`~caldera.algorithm.decomposition.Decomposition`: what
    :meth:`caldera.nn.compressed_linear.CompressedLinear.from_decomposition` builds the layer from (its
    docstring gives the arguments). Every tensor is on the CPU."""
    n, d = dec.Q.shape
    dense_q = dec.Q_codes is None
    if dense_q:
        if q_quantizer is not None:
            raise ValueError(f"q_quantizer={q_quantizer!r} given, but the {dec.method!r} decomposition has no "
                             "Q codes (its Q is stored as a float tensor)")
        Qf = dec.Q.detach().float().cpu()
        qdt = torch.float16 if torch.equal(Qf.half().float(), Qf) else torch.float32
        tensors: dict[str, Tensor] = {"Q_dense": Qf.to(qdt).contiguous()}
        qname, q_codes_dtype = None, None
    else:
        if dec.Q_scale is None:
            raise ValueError(f"the {dec.method!r} decomposition has Q codes but no Q_scale; return "
                             "Q_scale=torch.tensor(1.0) for unscaled codes, or Q_codes=None for a float Q")
        qname = q_quantizer or _infer_q_quantizer(dec)
        codes = narrow_codes(dec.Q_codes.detach().cpu())
        q_scale = dec.Q_scale.detach().float().cpu().clone()
        tensors = {"Q_codes": codes, "Q_scale": q_scale}
        tensors.update(_declared_extras(dec, qname, n, d))
        q_codes_dtype = _dtype_name(dec.Q_codes.dtype)
    meta: dict[str, Any] = {
        "version": META_VERSION,
        "method": dec.method,
        "in_features": d,
        "out_features": n,
        "q_quantizer": qname,
        "q_codes_dtype": q_codes_dtype,
        "rht": dec.rht is not None,
        "rank": dec.rank,
        "ft_rank": int(ft_rank),
        "lr_format": None,
        "l_quantizer": None,
        "r_quantizer": None,
        "lr_codes_dtype": None,
        "signs_trainable": False,
        "bias": bias is not None,
        "ft_dtype": _dtype_name(ft_dtype) if ft_rank else None,
    }
    if dense_q:
        meta["q_format"] = _dtype_name(tensors["Q_dense"].dtype)
    elif check:
        Q = dequantize(qname, codes, q_scale, meta["q_codes_dtype"], _extras_of(tensors))
        Q_want = dec.Q.detach().float().cpu()  # the stored codes are decoded on the CPU
        if not _close(Q, Q_want):
            raise ValueError(
                f"Q_codes decoded with quantizer {qname!r} do not reproduce dec.Q (max |diff| "
                f"{float((Q - Q_want).abs().max()):.3g}); pass the right q_quantizer"
            )
    if dec.rht is not None:
        tensors["S_U"] = _signs_tensor(dec.rht.S_U)
        tensors["S_V"] = _signs_tensor(dec.rht.S_V)
    k = dec.rank
    if not 0 <= ft_rank <= k:
        raise ValueError(f"ft_rank={ft_rank} must be in [0, rank={k}]")
    if ft_dtype not in _FT_DTYPES.values():
        raise ValueError(f"ft_dtype={ft_dtype}; accepted: {sorted(_FT_DTYPES)}")
    if k:
        L, R = dec.L.detach().float().cpu(), dec.R.detach().float().cpu()
        if ft_rank:
            tensors["L_ft"] = L[:, :ft_rank].to(ft_dtype).contiguous()
            tensors["R_ft"] = R[:ft_rank].to(ft_dtype).contiguous()
        if dec.L_codes is not None and dec.R_codes is not None:
            lname = lr_quantizer or _infer_lr_quantizer(dec, "l")
            rname = lr_quantizer or _infer_lr_quantizer(dec, "r")
            meta.update(
                lr_format="quantized",
                l_quantizer=lname,
                r_quantizer=rname,
                lr_codes_dtype=_dtype_name(dec.L_codes.codes.dtype),
            )
            if torch.iinfo(dec.R_codes.codes.dtype).bits > torch.iinfo(dec.L_codes.codes.dtype).bits:
                meta["r_codes_dtype"] = _dtype_name(dec.R_codes.codes.dtype)  # R's codes do not fit L's dtype
            Lc, Rc = narrow_codes(dec.L_codes.codes.cpu()), narrow_codes(dec.R_codes.codes.cpu())
            Ls, Rs = dec.L_codes.scale.detach().float().cpu(), dec.R_codes.scale.detach().float().cpu()
            if check:
                Lt = dequantize(lname, Lc, Ls, factor_codes_dtype(meta, "l"))
                Rq = dequantize(rname, Rc, Rs, factor_codes_dtype(meta, "r"))
                if not (_close(Lt.T, L) and _close(Rq, R)):
                    raise ValueError(f"L/R codes decoded with {lname!r}/{rname!r} do not reproduce dec.L/dec.R")
            if k > ft_rank:
                tensors.update(
                    L_codes=Lc[ft_rank:].contiguous(),
                    L_scale=Ls.clone(),
                    R_codes=Rc[ft_rank:].contiguous(),
                    R_scale=Rs.clone(),
                )
        else:
            exact16 = torch.equal(L.half().float(), L) and torch.equal(R.half().float(), R)
            dt = torch.float16 if exact16 else torch.float32
            meta["lr_format"] = _dtype_name(dt)
            if k > ft_rank:
                tensors["L_16"] = L[:, ft_rank:].to(dt).contiguous()
                tensors["R_16"] = R[ft_rank:].to(dt).contiguous()
    if bias is not None:
        if bias.shape != (n,):
            raise ValueError(f"bias has shape {tuple(bias.shape)}; expected ({n},)")
        tensors["bias"] = bias.detach().cpu().clone()
    return meta, tensors


def _declared_extras(dec: Decomposition, qname: str, n: int, d: int) -> dict[str, Tensor]:
    """``{"Q_<name>": tensor}`` of ``dec.Q_extras``, checked against what quantizer ``qname`` declares for an n×d
    matrix (``stored_extras``: the same names, shapes and dtypes) and its scale against ``scale_shapes``."""
    q = resolve_quantizer(qname)
    shapes = [tuple(int(x) for x in sh) for sh in q.scale_shapes(n, d)]
    if tuple(dec.Q_scale.shape) not in shapes:
        raise ValueError(f"the {dec.method!r} decomposition's Q_scale has shape {tuple(dec.Q_scale.shape)}; "
                         f"quantizer {qname!r} stores scales of an {n}x{d} matrix with shape "
                         f"{' or '.join(map(str, shapes))} (Quantizer.scale_shapes)")
    declared = q.stored_extras(n, d)
    given = dict(dec.Q_extras or {})
    if set(given) != set(declared):
        raise ValueError(f"the {dec.method!r} decomposition's Q_extras are {sorted(given)}; quantizer {qname!r} "
                         f"declares {sorted(declared)} (Quantizer.stored_extras)")
    out = {}
    for name, (shape, dt) in declared.items():
        t = given[name]
        if tuple(t.shape) != tuple(int(x) for x in shape) or t.dtype != dt:
            raise ValueError(f"the {dec.method!r} decomposition's Q_extras[{name!r}] is {tuple(t.shape)} "
                             f"{_dtype_name(t.dtype)}; quantizer {qname!r} declares {tuple(shape)} {_dtype_name(dt)}")
        out[f"Q_{name}"] = t.detach().cpu().clone().contiguous()
    return out


def _extras_of(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """The quantizer's extras among a layer's tensors, keyed by their declared names (``Q_`` removed)."""
    return {k[2:]: v for k, v in tensors.items() if k.startswith("Q_") and k not in ("Q_codes", "Q_scale", "Q_dense")}
