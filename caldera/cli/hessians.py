"""``caldera hessians``: calibration Hessians, layer by layer."""

from __future__ import annotations

import argparse
from typing import Any

from caldera.cli.common import (
    DEFAULT_MODEL,
    MAX_SEED,
    CLIError,
    _example,
    _report,
    check_memory,
    check_positions,
    guard_output,
    int_option,
    is_hessian_dir,
    load_dense_model,
    local_input,
    model_config,
    parse_layers,
    resolve_model_path,
)


def cmd_hessians(args: argparse.Namespace) -> int:

    from caldera.pipeline.hessians import collect_hessians
    from caldera.pipeline.models import is_checkpoint
    from caldera.pipeline.text import calibration_sequences

    layers = parse_layers(args.layers)  # a malformed --layers is refused before the model loads
    path = resolve_model_path(args.model)
    guard_output(args.out, option="--out", kind="Hessians folder of caldera hessians", same_kind=is_hessian_dir,
                 inputs={"--model": local_input(path)}, resumable=True)
    if is_checkpoint(path):
        raise CLIError("--model is a compressed checkpoint; Hessians are collected on the original model")
    config = model_config(path)  # config.json alone: a run that cannot fit is refused before the weights load
    if config is not None:
        check_fits(config, args)
    model, tok = load_dense_model(args.model, path)
    if config is None:  # a hub model: its config came with it
        check_fits(model.config, args)
    try:
        ids = calibration_sequences(tok, args.n_samples, args.seq_len, args.seed, source=args.source)
    except FileNotFoundError as e:
        raise CLIError(f"{e}\n(calibration text missing: run `caldera assets` first)") from None
    summary = collect_hessians(
        model,
        ids,
        args.out,
        layers=layers,
        batch_size=args.batch_size,
        progress=not args.quiet,
        seed=args.seed,
        model_name=args.model,
        source=args.source,
    )
    return _report(args, summary, [f"Hessians in {args.out}: {len(summary['computed'])} layers computed, "
                                   f"{len(summary['skipped'])} already there ({summary['n_tokens']} calibration "
                                   f"tokens of {args.source})"])



def check_fits(config: Any, args: argparse.Namespace) -> None:
    """``--seq-len`` within the model's positions and the collection's memory (:func:`hessian_memory`) within what
    this machine has available, for the model of transformers ``config``: :class:`CLIError` naming the options
    otherwise."""
    check_positions(config, args.seq_len, "--seq-len")
    check_memory(hessian_memory(config, args.n_samples, args.batch_size, args.seq_len),
                 f"collecting Hessians of {args.n_samples} sequences of {args.seq_len} tokens, {args.batch_size} at a "
                 "time,", "lower --n-samples, --seq-len or --batch-size")


def hessian_memory(cfg: Any, n_samples: int, batch: int, seq_len: int) -> int:
    """Bytes the layer-by-layer collection holds at its peak beyond the model's own weights, roughly: every
    sequence's float32 hidden states in and out of the layer (and a spare), one batch's forward through it, its
    Hessians (float64, the widest input's square, four groups), and the transients of writing one group
    (``H = S / count``, its symmetrized copy and the serialized bytes, float64: four more squares).
    ``cfg``: the model's transformers config."""
    hidden = getattr(cfg, "hidden_size", 0) or 0
    inter = getattr(cfg, "intermediate_size", 0) or 4 * hidden
    heads = getattr(cfg, "num_attention_heads", 1) or 1
    return (12 * n_samples * seq_len * hidden + 4 * batch * seq_len * (2 * inter + 8 * hidden + (heads + 1) * seq_len)
            + 64 * max(hidden, inter) ** 2)


def add_parser(sub: Any, raw: Any) -> None:
    """This command's parser (``caldera COMMAND --help``)."""
    from caldera.pipeline.text import CALIBRATION_SOURCE

    p = sub.add_parser(
        "hessians",
        help="collect calibration Hessians layer by layer",
        description="Propagate calibration text through the original model layer by layer and "
        "write one Hessian file per decoder layer (resumable).",
        formatter_class=raw, epilog=_example("caldera hessians --model smollm2 --n-samples 16 --seq-len 256 --out H"),
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="smollm2 (default), gemma3, a local folder or a hub name")
    p.add_argument(
        "--source",
        default=CALIBRATION_SOURCE,
        help=f"calibration text (default {CALIBRATION_SOURCE}; paper scale: redpajama)",
    )
    p.add_argument("--n-samples", type=int_option(1, meaning="calibration sequences"), default=16,
                   help="calibration sequences (default 16)")
    p.add_argument("--seq-len", type=int_option(1, meaning="tokens per sequence, at most the model's "
                                                 "max_position_embeddings"), default=256,
                   help="tokens per sequence (default 256; at most the model's max_position_embeddings)")
    p.add_argument("--seed", type=int_option(0, MAX_SEED, "the sampler's seed"), default=0,
                   help="calibration sampler seed (default 0)")
    p.add_argument("--batch-size", type=int_option(1, meaning="sequences per forward"), default=8,
                   help="sequences per forward (default 8)")
    p.add_argument("--layers", help="subset of decoder layers, e.g. 0,1,2 or 0-5 (default all)")
    p.add_argument("--out", required=True, help="output folder for layer_XXX.safetensors")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars and no summary (errors only)")
    p.set_defaults(func=cmd_hessians)
