"""``caldera lm-eval``: lm-eval's own command line with the caldera quantization method registered."""

from __future__ import annotations

import sys
from typing import Any

from caldera.cli.common import _example


def cmd_lm_eval(rest: list[str]) -> int:
    """lm-eval's own command line (``lm_eval.__main__.cli_evaluate``, same arguments, same outputs), run in this
    process after the ``caldera`` quantization method is registered with transformers, so
    ``--model hf --model_args pretrained=CKPT`` evaluates the compressed checkpoint (its CompressedLinear layers)."""
    from caldera.pipeline.hf import register

    if rest[:1] in (["-h"], ["--help"]) or not rest:
        from caldera.eval.zeroshot import tasks_dir

        example = _example("caldera lm-eval --model hf --model_args pretrained=CKPT --tasks caldera_arc_easy "
                           f"--include_path {tasks_dir()} --limit 100")
        print("caldera lm-eval: lm-eval's own CLI (its help follows), run with the caldera quantization method "
              f"registered.\n{example}\n(the caldera_* task YAMLs read the data `caldera assets --only tasks` "
              "prepares)\n")
    register()
    from lm_eval.__main__ import cli_evaluate

    saved = sys.argv
    sys.argv = ["lm_eval", *rest]
    try:
        cli_evaluate()
    except SystemExit as e:  # argparse --help / errors
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    finally:
        sys.argv = saved
    return 0



def add_parser(sub: Any, raw: Any) -> None:
    """This command's parser (``caldera COMMAND --help``)."""
    sub.add_parser(
        "lm-eval",
        help="lm-eval's own CLI with the caldera method registered (--model hf --model_args pretrained=CKPT)",
        description="Every argument goes to lm-eval's CLI unchanged. Example: caldera lm-eval --model hf "
        "--model_args pretrained=CKPT --tasks caldera_arc_easy --include_path $(python -c 'import caldera.eval."
        "zeroshot as z; print(z.tasks_dir())')",
        add_help=False,
    )
