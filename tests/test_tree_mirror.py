"""The test tree mirrors caldera/: the tests of ``caldera/<folder>/<name>.py`` live in
``tests/<folder>/test_<name>.py``. :data:`TESTED_ELSEWHERE` lists the modules whose tests are still in another
file (a package's shared test file, the CLI's, the workflow's); it may only shrink."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TESTED_ELSEWHERE = frozenset({
    "eval/tasks/utils.py",
    "eval/throughput.py",
    "methods/caldera_method.py",
    "pipeline/allocate.py",
    "pipeline/export.py",
})


def _modules() -> set[str]:
    pkg = ROOT / "caldera"
    return {p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py") if p.name != "__init__.py"}


def _mirror(module: str) -> Path:
    path = Path(module)
    return ROOT / "tests" / path.parent / f"test_{path.name}"


def test_every_module_has_its_mirrored_test_file():
    """A new module comes with tests/<folder>/test_<name>.py."""
    missing = sorted(m for m in _modules() - TESTED_ELSEWHERE if not _mirror(m).exists())
    assert not missing, [str(_mirror(m).relative_to(ROOT)) for m in missing]


def test_the_exceptions_are_modules_still_without_one():
    """A module that gained its test file, or no longer exists, leaves the list."""
    assert not {m for m in TESTED_ELSEWHERE if _mirror(m).exists()}
    assert TESTED_ELSEWHERE <= _modules(), TESTED_ELSEWHERE - _modules()
