"""``caldera export``: a compressed checkpoint as a plain Hugging Face folder that needs no ``caldera`` import.

Every :class:`~caldera.nn.compressed_linear.CompressedLinear` is replaced by a dense ``nn.Linear`` with
``weight = Ŵ = unrotate(Q + L R)`` in float32 (:func:`caldera.pipeline.checkpoint.materialize`), and the model,
its config and tokenizer are written with ``save_pretrained`` (safetensors). The folder loads with
``AutoModelForCausalLM.from_pretrained(DIR)`` and ``lm_eval --model hf --model_args pretrained=DIR``. The
storage savings are of course gone: this is for tools that cannot run the compressed layers.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from caldera.atomic import new_folder


def export_hf(checkpoint: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write the reconstructed model of ``checkpoint`` to the new folder ``out`` (atomically: a temporary
    sibling folder renamed at the end). Returns ``out``. ``out`` must not exist yet."""
    from caldera.pipeline.checkpoint import load_compressed, materialize

    out = new_folder(out)
    model, tok = load_compressed(checkpoint)
    n = materialize(model)
    if n == 0:
        raise ValueError(f"{checkpoint} has no compressed layers; nothing to export")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        if tok is not None:
            tok.save_pretrained(tmp)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
