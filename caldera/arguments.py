"""Bounded integer options of the command-line parsers (``caldera``'s commands and the report modules' own):
an argparse ``type`` that refuses a value out of range naming the bounds and what the option counts, and the
parser check that every such option holds an integer."""

from __future__ import annotations

import argparse
from typing import Any

#: the largest seed every sampler of the commands takes (torch generators: below 2**63 as a signed 64-bit integer)
MAX_SEED = 2**63 - 1


def out_of_range(value: int, lo: int, hi: int | None, meaning: str = "") -> str:
    """The refusal of ``value`` outside ``[lo, hi]`` (``hi`` None: no upper bound): the value, the bounds and what
    the option counts (``meaning``)."""
    bounds = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
    return f"{value} is out of range: expected an integer {bounds}" + (f" ({meaning})" if meaning else "")


def int_option(lo: int, hi: int | None = None, meaning: str = "") -> Any:
    """An argparse ``type``: an integer in ``[lo, hi]``. A value that is no integer reads as argparse's own
    "invalid int value"; one out of range is refused by :func:`out_of_range`."""

    def parse(s: str) -> int:
        v = int(s)  # ValueError: argparse says "invalid int value: 's'"
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(out_of_range(v, lo, hi, meaning))
        return v

    parse.__name__ = "int"
    parse.int_option = True  # type: ignore[attr-defined]
    return parse


class IntOptionParser(argparse.ArgumentParser):
    """An argument parser that checks every integer option (:func:`int_option`) to hold an integer after parsing:
    Python 3.11's argparse drops a ``--`` value (``--seq-len=--``) without calling the option's type."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        ns, rest = super().parse_known_args(args, namespace)
        for action in self._actions:
            value = getattr(ns, action.dest, None)
            if getattr(action.type, "int_option", False) and value is not None and (
                    isinstance(value, bool) or not isinstance(value, int)):
                self.error(f"argument {'/'.join(action.option_strings)}: expected an integer, got {value!r}")
        return ns, rest
