"""caldera.arguments: bounded integer options and the parser that checks them."""

from __future__ import annotations

import argparse

import pytest

from caldera.arguments import MAX_SEED, IntOptionParser, int_option, out_of_range


def _parser():
    ap = IntOptionParser(prog="p")
    ap.add_argument("--n", type=int_option(1, 10, "things"))
    ap.add_argument("--m", type=int_option(0), default=3)
    return ap


@pytest.mark.parametrize("argv, want", [(["--n", "1"], (1, 3)), (["--n", "10", "--m", "0"], (10, 0)),
                                        (["--m", str(MAX_SEED)], (None, MAX_SEED)), ([], (None, 3))])
def test_values_inside_the_bounds_are_kept(argv, want):
    ns = _parser().parse_args(argv)
    assert (ns.n, ns.m) == want


@pytest.mark.parametrize("argv, words", [
    (["--n", "0"], "argument --n: 0 is out of range: expected an integer in [1, 10] (things)"),
    (["--n", "11"], "argument --n: 11 is out of range: expected an integer in [1, 10] (things)"),
    (["--m", "-1"], "argument --m: -1 is out of range: expected an integer >= 0"),
    (["--n", "1.5"], "argument --n: invalid int value: '1.5'"),
    (["--n=--"], "argument --n: "),
])
def test_values_outside_the_bounds_or_not_integers_are_refused_naming_the_option(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        _parser().parse_args(argv)
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_the_refusal_names_the_value_the_bounds_and_the_meaning():
    assert out_of_range(7, 1, 5, "rank") == "7 is out of range: expected an integer in [1, 5] (rank)"
    assert out_of_range(-2, 0, None) == "-2 is out of range: expected an integer >= 0"


def test_a_plain_parser_lets_a_dash_dash_value_through_this_one_does_not(capsys):
    """What IntOptionParser is for: argparse (3.11) may turn ``--n=--`` into [] without calling the type."""
    plain = argparse.ArgumentParser(prog="p")
    plain.add_argument("--n", type=int_option(1, 10))
    try:
        got = plain.parse_args(["--n=--"]).n
    except SystemExit:  # an argparse that calls the type on '--' refuses it itself
        got = None
    assert got in ([], None)
    with pytest.raises(SystemExit):
        _parser().parse_args(["--n=--"])
    err = capsys.readouterr().err
    assert "expected an integer, got []" in err or "invalid int value: '--'" in err
