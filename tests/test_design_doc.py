"""``docs/design.md`` is true to the tree: every path it names exists, and every package and top-level module of
``caldera`` is named in it (a module added, moved or removed without the page saying so fails here)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"

#: first path segments of the repository's own files and folders that the page may name
TOP = ("caldera/", "workflow/", "config/", "tests/", "benchmarks/", "theory/", "paper_tables/", "docs/")
#: file names the page cites inside a folder it names just before (``c/``, ``README.md`` of ``caldera/kernels/``)
RELATIVE_OK = re.compile(r"^[\w.-]+(/)?$")


def _code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def _repo_paths(text: str) -> list[str]:
    """The code spans that are repository paths: ``caldera/…``, ``workflow/…``, … (globs like ``<name>`` and
    ``*_costs.py`` are patterns, not paths)."""
    return [s for s in _code_spans(text) if s.startswith(TOP) and not re.search(r"[<>*]", s)]


def test_every_path_the_page_names_exists():
    text = DESIGN.read_text()
    paths = _repo_paths(text)
    assert len(paths) > 40, paths  # the page names the tree, not a handful of files
    missing = sorted({p for p in paths if not (ROOT / p.split(" ")[0].rstrip(",.")).exists()})
    assert not missing, missing


def test_every_package_and_top_level_module_is_named():
    text = DESIGN.read_text()
    pkg = ROOT / "caldera"
    packages = sorted(p.relative_to(ROOT).as_posix() + "/" for p in pkg.iterdir()
                      if p.is_dir() and (p / "__init__.py").exists())
    modules = sorted(p.relative_to(ROOT).as_posix() for p in pkg.glob("*.py") if p.name != "__init__.py")
    spans = set(_code_spans(text))
    # a top-level module may be named by its path or by its file name in the foundation's list
    unnamed = [m for m in packages + modules if m not in spans and Path(m).name not in spans]
    assert not unnamed, unnamed


def test_every_experiments_module_is_named():
    """The experiments layer is the one whose modules each carry a role on the page."""
    spans = set(_code_spans(DESIGN.read_text()))
    base = ROOT / "caldera" / "experiments"
    mods = sorted(p for p in base.rglob("*.py") if p.name != "__init__.py")
    unnamed = [p.relative_to(ROOT).as_posix() for p in mods if p.name not in spans]
    assert not unnamed, unnamed


def test_the_check_fails_for_a_path_that_is_gone(tmp_path):
    """The path check is not vacuous: a made-up module path is reported."""
    text = "see `caldera/algorithm/no_such_module.py` and `caldera/algorithm/ldlq.py`"
    paths = _repo_paths(text)
    assert paths == ["caldera/algorithm/no_such_module.py", "caldera/algorithm/ldlq.py"]
    assert [p for p in paths if not (ROOT / p).exists()] == ["caldera/algorithm/no_such_module.py"]
