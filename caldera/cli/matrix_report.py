"""``caldera matrix-report``: the matrix-level ablations of :mod:`caldera.reports.matrix`."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_matrix_report(args: argparse.Namespace, rest: list[str]) -> int:
    from caldera.reports.matrix import main as report_main  # lazy: the matrix report imports its plotting stack

    return int(report_main(rest) or 0)



def add_parser(sub: Any, raw: Any) -> None:
    """This command's parser (``caldera COMMAND --help``)."""
    p = sub.add_parser(
        "matrix-report",
        help="matrix-level ablations (App. G.1) on seeded matrices",
        description="Runs caldera.reports.matrix; arguments after the command go to it "
        "(caldera matrix-report -- --help for its options).",
        add_help=False,
    )
    p.set_defaults(func=None)
