"""The model card (``README.md``) of a checkpoint folder, written from its ``caldera_config.json``: base model,
method and its settings, bits per weight, calibration, the caldera version and commit that wrote it
(:mod:`.provenance`), how to load it and that loading it needs caldera. A pure function of the config, so a rerun
writes the same bytes."""

from __future__ import annotations

import json
from typing import Any

from caldera.pipeline.checkpoint.provenance import UNKNOWN


def _bits_line(bits: Any) -> str:
    if not isinstance(bits, dict) or "average_bits" not in bits:
        return "not recorded"
    line = f"{bits['average_bits']:.3f} (the paper's formula)"
    if "storage_bits_per_weight" in bits:
        line += f", {bits['storage_bits_per_weight']:.3f} as stored (codes, scales, signs)"
    widths = ", ".join(f"{k} {bits[k]}" for k in ("b_q", "b_lr", "rank") if k in bits)
    return line + (f"; {widths}" if widths else "")


def card_facts(config: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, value)`` of what the card and ``caldera info`` state of a checkpoint's origin (``config``: its
    ``caldera_config.json``): base model and weights digest, method, bits, calibration, caldera version, commit;
    ``unknown`` for what the config does not record."""
    prov = config.get("provenance") if isinstance(config.get("provenance"), dict) else {}
    base = prov.get("base_model") if isinstance(prov.get("base_model"), dict) else {}
    cal = prov.get("calibration") if isinstance(prov.get("calibration"), dict) else {}
    method_config = config.get("method_config") if isinstance(config.get("method_config"), dict) else {}
    params = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(method_config.items()))
    calibration = (f"{cal.get('n_tokens', UNKNOWN)} tokens of {cal.get('source', UNKNOWN)} "
                   f"({cal.get('n_sequences', UNKNOWN)} sequences of {cal.get('seq_len', UNKNOWN)}, "
                   f"seed {cal.get('seed', UNKNOWN)}); calibration sha256 {cal.get('calibration_sha256', UNKNOWN)}, "
                   f"Hessians sha256 {cal.get('hessians_sha256', UNKNOWN)}") if cal else UNKNOWN
    return [
        ("base model", f"{base.get('name', UNKNOWN)} (weights sha256 {base.get('weights_sha256', UNKNOWN)})"),
        ("method", f"{config.get('method', UNKNOWN)} ({params})" if params else str(config.get("method", UNKNOWN))),
        ("bits per weight", _bits_line(config.get("bits"))),
        ("decoder layers kept dense", str(config.get("dense_layers") or "none")),
        ("calibration", calibration),
        ("caldera version", str(prov.get("caldera_version", UNKNOWN))),
        ("git commit", str(prov.get("git_commit", UNKNOWN))),
    ]


def model_card(config: dict[str, Any]) -> str:
    """The ``README.md`` of a checkpoint whose ``caldera_config.json`` is ``config`` (before its manifest):
    hub metadata (library, tags, base model), what it is (:func:`card_facts`) and how to load it."""
    prov = config.get("provenance") if isinstance(config.get("provenance"), dict) else {}
    base = prov.get("base_model", {}).get("name") if isinstance(prov.get("base_model"), dict) else None
    front = ["---", "library_name: transformers", "tags:", "- caldera", "- quantized", "- low-rank"]
    if isinstance(base, str) and base.count("/") == 1 and not base.startswith((".", "/", "~")):
        front.append(f"base_model: {base}")  # a hub id; an asset name or a local folder is no hub link
    front.append("---")
    facts = [f"- **{label}**: {value}" for label, value in card_facts(config)]
    lines = [
        *front,
        "",
        f"# {base or 'A model'} compressed with caldera ({config.get('method', UNKNOWN)})",
        "",
        "Every compressed linear layer stores `W ≈ Q + L R` (CALDERA, NeurIPS 2024): a low-precision backbone Q "
        "and low-rank factors L, R, in the caldera checkpoint format (`model.safetensors`, `caldera_config.json` "
        "with a content manifest, `checksums.json`).",
        "",
        *facts,
        "",
        "## Loading it needs caldera",
        "",
        "Install caldera (`pip install caldera`; from a caldera checkout: `pip install -e .`), then:",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "import caldera  # registers the 'caldera' quantization method (an installed caldera also does it at start-up)",
        "",
        'model = AutoModelForCausalLM.from_pretrained("PATH_OR_REPO")',
        'tokenizer = AutoTokenizer.from_pretrained("PATH_OR_REPO")',
        "# or: model, tokenizer = caldera.load_compressed(\"PATH_OR_REPO\")",
        "```",
        "",
        "Both loaders verify the checkpoint (checksums, content manifest, every tensor) before building the model. "
        "Without caldera, transformers refuses the folder with an error that says so (its `config.json` names no "
        "weights file transformers could read alone); it never builds the model with random weights. "
        "`caldera export CKPT --out DIR` writes a plain dense Hugging Face folder that loads without caldera. "
        "`caldera info CKPT` prints this provenance.",
        "",
    ]
    return "\n".join(lines)
