"""``caldera export`` and ``caldera convert``: a plain Hugging Face folder, or an old checkpoint rewritten."""

from __future__ import annotations

import argparse
from typing import Any

from caldera.cli.common import CLIError, _example, _report, guard_output, local_input, require_path
from caldera.cli.info import CHECKPOINT_FIX


def cmd_export(args: argparse.Namespace) -> int:
    from caldera.atomic import OutputExists
    from caldera.pipeline.export import export_hf

    require_path(args.checkpoint, "checkpoint", "folder", CHECKPOINT_FIX)
    guard_output(args.out, option="--out", kind="new folder", same_kind=None,
                 inputs={"checkpoint": local_input(args.checkpoint)})
    try:
        out = export_hf(args.checkpoint, args.out)
    except OutputExists as e:
        raise CLIError(f"--out {e}") from None
    except ValueError as e:
        raise CLIError(str(e)) from None
    return _report(args, {"exported": str(out), "checkpoint": args.checkpoint},
                   [f"exported {args.checkpoint} to {out}: a plain Hugging Face folder (dense weights, config, "
                    "tokenizer) that AutoModelForCausalLM.from_pretrained loads without caldera"])


def cmd_convert(args: argparse.Namespace) -> int:
    from caldera.atomic import OutputExists
    from caldera.pipeline.checkpoint import convert_checkpoint

    require_path(args.checkpoint, "checkpoint", "folder", CHECKPOINT_FIX)
    guard_output(args.out, option="--out", kind="new folder", same_kind=None,
                 inputs={"checkpoint": local_input(args.checkpoint)})
    try:
        out = convert_checkpoint(args.checkpoint, args.out)
    except OutputExists as e:
        raise CLIError(f"--out {e}") from None
    return _report(args, {"converted": str(out), "checkpoint": args.checkpoint},
                   [f"converted {args.checkpoint} to {out}: the current checkpoint format (config.json and the "
                    "content manifest)"])



def add_parser(sub: Any, raw: Any) -> None:
    """The parsers of ``export`` and ``convert``."""
    p = sub.add_parser(
        "export",
        help="write a plain Hugging Face folder (reconstructed dense weights) from a checkpoint",
        description="Reconstructs W = unrotate(Q + LR) for every compressed layer and saves model, config and "
        "tokenizer with save_pretrained: AutoModelForCausalLM / lm_eval --model hf load it without caldera.",
        formatter_class=raw, epilog=_example("caldera export CKPT --out CKPT-dense"),
    )
    p.add_argument("checkpoint", help="the checkpoint folder (what caldera compress --out writes)")
    p.add_argument("--out", required=True, help="new folder to write (must not exist)")
    p.add_argument("--json", action="store_true", help="print the result as a JSON record instead of a line")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser(
        "convert",
        help="rewrite a format-1 checkpoint (no config.json, no content manifest) in the current format",
        description="Verifies the old checkpoint as far as format 1 allows (checksums, structure, reconstruction "
        "fingerprints) and writes it anew: config.json with the caldera quantization config (from_pretrained, "
        "lm-eval) and the content manifest.",
        formatter_class=raw, epilog=_example("caldera convert results/ck --out results/ck2"),
    )
    p.add_argument("checkpoint", help="the format-1 checkpoint folder to rewrite")
    p.add_argument("--out", required=True, help="new folder to write (must not exist)")
    p.add_argument("--json", action="store_true", help="print the result as a JSON record instead of a line")
    p.set_defaults(func=cmd_convert)
