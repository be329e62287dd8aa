"""The test tree mirrors caldera/: the tests of ``caldera/<folder>/<name>.py`` live in
``tests/<folder>/test_<name>.py``. Every module has that file; :data:`TESTED_ELSEWHERE` is where a module whose
tests must live elsewhere would be named, with the reason in a comment (none is)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TESTED_ELSEWHERE: frozenset[str] = frozenset()


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
