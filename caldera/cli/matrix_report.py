"""``caldera matrix-report``: the matrix-level ablations of :mod:`caldera.experiments.report.matrix`."""

from __future__ import annotations

import argparse
from typing import Any

from caldera.cli.common import guard_output

#: the folder ``caldera.experiments.report.matrix`` writes without ``--out``
DEFAULT_OUT = "results/matrix_report"
REPORT_FILES = ("matrix_report.md", "matrix_report.json")


def _out(rest: list[str]) -> str:
    """The ``--out`` among the report's arguments (``--out DIR`` or ``--out=DIR``), else its default."""
    out = DEFAULT_OUT
    for i, a in enumerate(rest):
        if a == "--out" and i + 1 < len(rest):
            out = rest[i + 1]
        elif a.startswith("--out="):
            out = a.split("=", 1)[1]
    return out


def cmd_matrix_report(args: argparse.Namespace, rest: list[str]) -> int:
    # lazy: the matrix report imports its plotting stack
    from caldera.experiments.report.matrix import main as report_main

    if not {"-h", "--help"} & set(rest):  # the report writes its two files into --out (a new or its own folder)
        guard_output(_out(rest), option="--out", kind="matrix report folder", resumable=True,
                     same_kind=lambda p: p.is_dir() and any((p / f).is_file() for f in REPORT_FILES))
    return int(report_main(rest) or 0)



def add_parser(sub: Any, raw: Any) -> None:
    """This command's parser (``caldera COMMAND --help``)."""
    p = sub.add_parser(
        "matrix-report",
        help="matrix-level ablations (App. G.1) on seeded matrices",
        description="Runs caldera.experiments.report.matrix; arguments after the command go to it "
        "(caldera matrix-report -- --help for its options).",
        add_help=False,
    )
    p.set_defaults(func=None)
