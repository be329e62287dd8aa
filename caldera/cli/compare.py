"""``caldera compare``: a run's tables folder against a committed record, claim by claim and row by row."""

from __future__ import annotations

import argparse
from typing import Any

from caldera.cli.common import _emit, _example, require_path

DEFAULT_AGAINST = "paper_tables/generated"


def cmd_compare(args: argparse.Namespace) -> int:
    from caldera.experiments.report.compare import compare_folders, differs, summary_lines

    require_path(args.run, "run", "folder", "give a run's tables folder (its config's tables_dir) or results/NAME")
    require_path(args.against, "--against", "folder", "give a tables folder, e.g. the committed "
                 f"{DEFAULT_AGAINST}")
    res = compare_folders(args.run, args.against)
    _emit(args, res, summary_lines(res))
    return 1 if differs(res) else 0


def add_parser(sub: Any, raw: Any) -> None:
    """This command's parser (``caldera COMMAND --help``)."""
    p = sub.add_parser(
        "compare",
        help="a run's verdicts and tables against a committed record",
        description="Compare a run's tables folder (its config's tables_dir: claims.json and the table JSONs) "
        "with a committed record: each claim's verdict, each interval's estimate against the record's interval "
        "(its rerun prediction interval where it has one, else its 95 % CI), and each row's perplexities against "
        "the record's 95 % interval. Prints every verdict change and every difference beyond its interval; exit "
        "status 1 when there is one, 0 when there is none.",
        formatter_class=raw,
        epilog=_example("caldera compare results/smoke/tables --against results/smoke-before/tables",
                        "caldera compare results/mini/tables --json"),
    )
    p.add_argument("run", help="the run's tables folder (or results/NAME, whose tables/ holds them)")
    p.add_argument("--against", default=DEFAULT_AGAINST,
                   help=f"the record to compare with (default: {DEFAULT_AGAINST}, the committed default run)")
    p.add_argument("--json", action="store_true", help="print the JSON records instead of the summary")
    p.add_argument("--out", help="write the JSON records here (default: none written)")
    p.set_defaults(func=cmd_compare)
