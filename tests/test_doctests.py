"""The docstring examples of the package run as doctests: every module whose source holds a ``>>>`` prompt."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "caldera"
MODULES = sorted(
    ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
    for p in PACKAGE.rglob("*.py")
    if ">>> " in p.read_text(encoding="utf-8")
)


def test_the_examples_are_found():
    assert "caldera.algorithm.decomposition" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    res = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False)
    assert res.attempted > 0 and res.failed == 0, f"{name}: {res.failed} of {res.attempted} examples failed"
