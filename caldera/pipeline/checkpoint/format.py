"""The checkpoint format: file names and versions, what is recorded of each compressed matrix (bits, fingerprints),
the content digests, and the configs derived from the model (``config.json``'s quantization scheme)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from caldera.bits import average_bits
from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline.layer_runner import decoder_layers
from caldera.pipeline.linears import LINEARS

FORMAT_VERSION = 2
#: Format 1 (before ``config.json`` and the content manifest): readable only by ``caldera convert``.
LEGACY_FORMAT = 1
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "caldera_config.json"
HF_CONFIG_FILE = "config.json"
CHECKSUM_FILE = "checksums.json"
QUANT_METHOD = "caldera"
#: the base model's generation settings, copied byte for byte when it has them
GENERATION_CONFIG_FILE = "generation_config.json"
#: the model card: provenance, scheme and how to load (:func:`caldera.pipeline.checkpoint.card.model_card`)
CARD_FILE = "README.md"
#: ``config.json`` key that makes a transformers without caldera refuse the folder (:data:`NEEDS_CALDERA`)
GUARD_KEY = "transformers_weights"
#: The value of :data:`GUARD_KEY` in a checkpoint's ``config.json``. transformers reads ``transformers_weights`` as
#: the name of the weights file and refuses, before building any model, a name that is no ``*.safetensors`` file,
#: with a ``ValueError`` that ends with the name: this text. Without caldera, transformers would only warn
#: "Unknown quantization type" and build the dense architecture with random weights for every compressed layer;
#: with caldera, its quantizer removes the key before the weights are looked up
#: (:class:`caldera.pipeline.hf.CalderaHfQuantizer`), so ``model.safetensors`` is read as usual.
NEEDS_CALDERA = (
    "this is a caldera-compressed checkpoint (quantization_config.quant_method 'caldera'): it loads only with the "
    "caldera package installed (pip install caldera; from a caldera checkout: pip install -e .) or imported first "
    "(import caldera); without caldera, transformers would build this model with random weights"
)
#: the files the model is built from: listed, unchanged and consistent, or the load is refused
MODEL_FILES = (MODEL_FILE, HF_CONFIG_FILE, CONFIG_FILE)
#: the files a tokenizer is saved as and loaded from (``save_pretrained`` / ``from_pretrained``)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "chat_template.jinja",
                   "chat_template.json")
_RERUN = "re-run `caldera compress` to rebuild the checkpoint"
_NO_VERIFY = "(to load it anyway, unverified: load_compressed(..., verify=False) / `--no-verify`)"
#: Relative tolerance of the stored reconstruction fingerprints (float64 sums of float32 values).
FINGERPRINT_RTOL = 1e-5


def layers_prefix(model: nn.Module) -> str:
    """State-dict prefix of the decoder layers (``"model.layers"`` for LlamaForCausalLM)."""
    layers = decoder_layers(model)
    for name, mod in model.named_modules():
        if mod is layers:
            return name
    raise ValueError("decoder layers not found among the model's modules")


def model_linear_shapes(model: nn.Module) -> list[tuple[int, int]]:
    """(out, in) of the seven linear layers of every decoder layer, in order (dense or compressed)."""
    return [(lin.out_features, lin.in_features) for layer in decoder_layers(model)
            for lin in (layer.get_submodule(name) for name in LINEARS)]


def matrix_bits(mod: CompressedLinear) -> dict[str, Any]:
    """What :func:`bits_summary` reads of one compressed matrix: shape, rank, ft_rank, bit widths
    (:meth:`CompressedLinear.bit_widths`), whether Q is stored as floats (``dense_q``), storage and tensor bits."""
    return {"shape": [mod.out_features, mod.in_features], "rank": mod.rank, "ft_rank": mod.ft_rank,
            **mod.bit_widths(), "dense_q": mod.dense_q, "storage_bits": mod.storage_bits(),
            "tensor_bits": mod.tensor_bits()}


def bits_summary(model: nn.Module, matrices: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Paper average bits over the model's linear shapes + true storage bits over the compressed matrices."""
    shapes = model_linear_shapes(model)
    out: dict[str, Any] = {"n_matrices_total": len(shapes), "n_matrices_compressed": len(matrices)}
    if not matrices:
        return out
    out["dense_q_matrices"] = sum(bool(m.get("dense_q")) for m in matrices)
    # The paper counts fine-tuned components at B_FT = 16 (BF16) bits, whatever dtype holds them here.
    keys = {(m["b_q"], m["b_lr"], m["rank"], m["ft_rank"]) for m in matrices}
    if len(keys) == 1:
        b_q, b_lr, rank, ft_rank = next(iter(keys))
        out["average_bits"] = average_bits(shapes, b_q, b_lr if rank > ft_rank else None, rank, ft_rank, 16)
        out.update(b_q=b_q, b_lr=b_lr, rank=rank, ft_rank=ft_rank)
    else:  # mixed settings: the same formula, matrix by matrix
        num = sum(
            m["b_q"] * m["shape"][0] * m["shape"][1]
            + ((m["rank"] - m["ft_rank"]) * (m["b_lr"] or 0) + m["ft_rank"] * 16) * (m["shape"][0] + m["shape"][1])
            for m in matrices
        )
        out["average_bits"] = num / sum(m["shape"][0] * m["shape"][1] for m in matrices)
    params = sum(m["shape"][0] * m["shape"][1] for m in matrices)
    out["storage_bits_per_weight"] = sum(m["storage_bits"] for m in matrices) / params
    out["tensor_bits_per_weight"] = sum(m["tensor_bits"] for m in matrices) / params
    out["compressed_params"] = params
    return out


def replace_module(root: nn.Module, path: str, new: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    setattr(root.get_submodule(parent_path), name, new)


def tied_keys(model: nn.Module) -> dict[str, str]:
    """``{alias: source}`` for state-dict entries that share storage with an earlier entry (tied lm_head)."""
    seen: dict[tuple, str] = {}
    out = {}
    for k, v in model.state_dict(keep_vars=True).items():
        if v.device.type == "meta" or v.numel() == 0:
            continue
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()), v.dtype)
        if key in seen:
            out[k] = seen[key]
        else:
            seen[key] = k
    return out


def _json_default(o: Any) -> Any:
    if isinstance(o, torch.dtype):
        return str(o).removeprefix("torch.")
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    return repr(o)


def base_config_dict(model: nn.Module) -> dict[str, Any]:
    cfg = model.config.to_dict()
    for k in ("_name_or_path", "quantization_config", "transformers_version", GUARD_KEY):
        cfg.pop(k, None)
    return cfg


def _module_tensors(tensors: dict[str, Tensor], path: str) -> dict[str, Tensor]:
    prefix = path + "."
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def weight_fingerprint(module: CompressedLinear) -> list[float]:
    """``[Σ W_ij, Σ W_ij²]`` (float64) of the module's rotated weight ``Q + L R (+ L_ft R_ft)``: what the stored
    codes, scales and factors decode to with the stored metadata (quantizer names, code dtypes). Stored in the
    checkpoint config and compared at load, so metadata that no longer matches the tensors (another quantizer
    name, a changed scale) is refused instead of decoding to a different model. (The RHT signs are tensors,
    covered by the checksums; the basis is skipped because it would cost two transforms per module.)"""
    # the check leaves no dequantized float32 cache behind (a verified load of a 7B model would otherwise hold
    # a dense fp32 copy of every compressed layer, 26 GB; a forward that wants the cache builds it itself)
    caches = module._Q_cache, module._L_cache, module._R_cache
    try:
        with torch.no_grad():  # trainable L_ft / R_ft / signs (fine-tuning) must not build a graph here
            W = module.rotated_weight().detach().double()
    finally:
        module._Q_cache, module._L_cache, module._R_cache = caches
    return [float(W.sum()), float(W.pow(2).sum())]


def tensor_digest(t: Tensor) -> str:
    """sha256 of a tensor's dtype, shape and bytes (the content manifest's entry for it)."""
    import hashlib

    t = t.detach().cpu().contiguous()
    h = hashlib.sha256(f"{_json_default(t.dtype)}|{list(t.shape)}|".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def json_digest(obj: Any) -> str:
    """sha256 of the canonical JSON of ``obj`` (sorted keys, no whitespace)."""
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _plain_json(obj: Any) -> Any:
    """``obj`` as it reads back from the JSON file (tuples as lists, dtypes as names)."""
    return json.loads(json.dumps(obj, default=_json_default))


def quantization_scheme(config: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint's ``caldera_config.json`` (``config``) stores, as ``config.json``'s
    ``quantization_config`` states it: ``q_bits`` / ``lr_bits`` / ``bits_per_weight`` (its ``bits`` summary, when
    it has one), ``ranks`` (the distinct ranks of its modules), the quantizers of Q, L and R, ``rht`` and
    ``dense_layers`` (decoder layers kept uncompressed)."""
    modules = config.get("modules")
    mods = [m for m in modules.values() if isinstance(m, dict)] if isinstance(modules, dict) else []

    def distinct(key: str) -> list[Any]:
        vals = {m[key] for m in mods if isinstance(m.get(key), (bool, int, float, str))}
        return sorted(vals, key=lambda v: (type(v).__name__, v))

    bits = config.get("bits") if isinstance(config.get("bits"), dict) else {}
    out: dict[str, Any] = {k: bits[b] for k, b in (("q_bits", "b_q"), ("lr_bits", "b_lr"),
                                                  ("bits_per_weight", "average_bits")) if b in bits}
    out.update({"ranks": distinct("rank"), "q_quantizers": distinct("q_quantizer"),
                "l_quantizers": distinct("l_quantizer"), "r_quantizers": distinct("r_quantizer"),
                "rht": distinct("rht"), "dense_layers": config.get("dense_layers", [])})
    return out


def hf_config_dict(base_config: dict[str, Any], method: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``config.json`` of a checkpoint: the base model's config plus ``quantization_config`` naming the
    ``caldera`` method (so ``AutoModelForCausalLM.from_pretrained`` dispatches to :mod:`caldera.pipeline.hf`) and
    stating the scheme of ``config`` (its ``caldera_config.json``: :func:`quantization_scheme`), and
    :data:`GUARD_KEY` set to :data:`NEEDS_CALDERA` (a transformers without caldera refuses the folder)."""
    qc = {"quant_method": QUANT_METHOD, "format_version": FORMAT_VERSION, "method": method,
          **(quantization_scheme(config) if config is not None else {})}
    return {**base_config, "quantization_config": qc, GUARD_KEY: NEEDS_CALDERA}


def tokenizer_file_problem(folder: str | Path) -> str | None:
    """``"<file>: <what is wrong>"`` for the first tokenizer file of ``folder`` (:data:`TOKENIZER_FILES`) stored as
    JSON that does not parse (truncated, not UTF-8), else None: what names the file when a tokenizer cannot be
    loaded (the tokenizer libraries' own errors do not)."""
    for name in TOKENIZER_FILES:
        p = Path(folder) / name
        if name.endswith(".json") and p.is_file():
            try:
                json.loads(p.read_bytes().decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as e:
                return f"{p} is not valid JSON ({type(e).__name__}: {e})"
    return None


def load_tokenizer_files(folder: str | Path) -> Any:
    """``AutoTokenizer.from_pretrained(folder)`` (local files only); ``ValueError`` naming the file and the fix when
    a tokenizer file is truncated or corrupt, or the folder's when the tokenizer cannot be built otherwise."""
    from transformers import AutoTokenizer

    problem = tokenizer_file_problem(folder)
    if problem is None:
        try:
            return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError, TypeError, KeyError, RuntimeError) as e:
            first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
            problem = f"the tokenizer files of {folder} cannot be loaded ({type(e).__name__}: {first[:300]})"
    raise ValueError(f"{problem}; save the tokenizer there again (tokenizer.save_pretrained) or copy its files from "
                     "the original model")


def bad(folder: Path, what: str) -> ValueError:
    """The error for an inconsistent checkpoint: it names the folder, what is wrong and the fix."""
    return ValueError(f"checkpoint {folder} is inconsistent: {what}; {_RERUN}")


def checkpoint_bits(model: nn.Module) -> dict[str, Any]:
    """The ``bits`` summary of a model with compressed layers (:func:`bits_summary` of
    its modules): what ``caldera compress`` records and ``caldera info`` reports."""
    return bits_summary(model, [matrix_bits(m) for m in model.modules() if isinstance(m, CompressedLinear)])
