"""caldera.version: the one place the package's version is written."""

from __future__ import annotations

import re
from pathlib import Path

import caldera
from caldera.version import __version__

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_and_its_distribution_state_the_same_version():
    """``caldera.__version__`` is this module's, and pyproject.toml's ``version`` is the same string (what
    ``pip install`` records): a checkpoint's provenance names the version that wrote it."""
    assert caldera.__version__ == __version__
    m = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert m and m.group(1) == __version__
