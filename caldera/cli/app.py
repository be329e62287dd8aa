"""The ``caldera`` command: :func:`build_parser` puts each command's parser (one module per command) under one
top-level parser, :func:`main` runs the chosen one.

``--model`` accepts ``smollm2`` (the cached SmolLM2-135M from ``caldera assets``), a local Hugging Face
folder, a compressed checkpoint folder (has ``caldera_config.json``) or, at paper scale, a hub name."""

from __future__ import annotations

import argparse
import logging
import sys

from caldera.cli import assets, compare, compress, cost, evaluate, export, hessians, info, lm_eval, matrix_report
from caldera.cli.common import CLIError, HelpFormatter, TqdmLogHandler, _Parser, quiet_progress
from caldera.cli.lm_eval import cmd_lm_eval
from caldera.cli.matrix_report import cmd_matrix_report

#: the top-level help's epilog: one example per command (plain text: argparse prints it as is)
EPILOG = """examples (caldera COMMAND --help for each):
  caldera assets                                     fetch and convert the offline models and text (once)
  caldera hessians --out H                           calibration Hessians, layer by layer (resumable)
  caldera compress --hessians H --method caldera --preset paper --param rank=64 --out CKPT
  caldera eval ppl|zeroshot|throughput --model CKPT  perplexity, zero-shot accuracy, generation speed
  caldera info CKPT                                  bits, shapes, ranks, per-matrix errors
  caldera cost --configfile config/mini.yaml --device cpu   predicted job time of a workflow config
  caldera export CKPT --out DENSE                    the reconstructed dense model (plain transformers)
  caldera convert OLD --out NEW                      a format-1 checkpoint in the current format
  caldera lm-eval --model hf --model_args pretrained=CKPT ...   lm-eval's own CLI on the compressed model
  caldera matrix-report                              matrix-level ablations (caldera.experiments.report.matrix)
  caldera compare results/mini/tables                a run against the committed record (paper_tables/generated)

--model takes smollm2 or gemma3 (cached by caldera assets), a local Hugging Face folder, a compressed
checkpoint folder (it has caldera_config.json) or, at paper scale, a hub name."""


def build_parser() -> argparse.ArgumentParser:
    from caldera import __version__

    ap = _Parser(
        prog="caldera",
        description="Compress, evaluate and inspect models with CALDERA (W ≈ Q + LR).",
        formatter_class=HelpFormatter,
        epilog=EPILOG,
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    ap.add_argument("--version", action="version", version=f"caldera {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    raw = HelpFormatter  # descriptions as written, each option's default shown

    for mod in (assets, hessians, compress, evaluate, info, cost, export, lm_eval, matrix_report, compare):
        mod.add_parser(sub, raw)
    return ap


def main(argv: list[str] | None = None) -> int:
    from caldera import openmp

    openmp.limit_spin()  # before torch loads (caldera.openmp: the engine's Python threads beside spinning workers)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "lm-eval":
        return cmd_lm_eval(argv[1:])
    if argv and argv[0] == "matrix-report":
        rest = argv[1:]
        if rest[:1] == ["--"]:
            rest = rest[1:]
        try:
            return cmd_matrix_report(argparse.Namespace(), rest)
        except ImportError as e:
            print(f"caldera matrix-report: not available ({e})", file=sys.stderr)
            return 2
        except CLIError as e:
            print(f"caldera matrix-report: error: {e}", file=sys.stderr)
            return 2
    ap = build_parser()
    args = ap.parse_args(argv)
    if getattr(args, "quiet", False):
        quiet_progress()
    handler = TqdmLogHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
    quiet = getattr(args, "quiet", False)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING if quiet else logging.INFO,
                        handlers=[handler])
    try:
        import torch

        with torch.no_grad():  # scoped: never leak a global grad-mode change into the caller
            return int(args.func(args) or 0)
    except CLIError as e:
        print(f"caldera {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as e:
        print(f"caldera {args.command}: error: {e}", file=sys.stderr)
        return 2

