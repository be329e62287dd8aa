"""The CALDERA paper's reported numbers, shipped as package data.

The files live in ``caldera/data/paper_reference/`` only (one CSV per paper table plus ``tables.json`` with
labels, units and column types; ``paper_tables/README.md`` lists them). Nothing outside the package is read
at run time.

Every number is stored as the paper prints it (``"10.0"``, ``"8.9"``, ``"85.4"``): use ``raw=True``
to get those strings, e.g. to compare against a printed rounding. Empty cells mean ``---`` in the paper
or "not applicable" and parse to ``None``.
"""

from __future__ import annotations

import csv
import io
import json
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = [
    "list_reference_tables",
    "load_reference_table",
    "reference_table_meta",
]

#: Location of the CSV files and ``tables.json`` inside the ``caldera`` package.
_DATA_DIR = ("data", "paper_reference")

_BOOL = {"Yes": True, "No": False}


def _read_text(filename: str) -> str:
    node = resources.files("caldera")
    for part in (*_DATA_DIR, filename):
        node = node.joinpath(part)
    return node.read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _index() -> dict[str, Any]:
    return json.loads(_read_text("tables.json"))


def list_reference_tables() -> list[str]:
    """Names of the shipped tables (CSV stems), e.g. ``"table1_llama2_zeroshot"``."""
    return list(_index()["tables"])


def _resolve(name: str) -> str:
    if not isinstance(name, str):
        raise ValueError(f"name must be a string, got {name!r}")
    tables = _index()["tables"]
    stem = name[:-4] if name.endswith(".csv") else name
    if stem in tables:
        return stem
    for key, meta in tables.items():  # also accept the paper's \label, e.g. "tab:mistral-7b"
        if meta["label"] == name:
            return key
    raise ValueError(f"unknown reference table {name!r}; known: {sorted(tables)} or their labels")


def reference_table_meta(name: str) -> dict[str, Any]:
    """Metadata for one table: ``label``, ``caption_summary``, ``units``, ``accuracy_metric``,
    ``columns`` (name -> ``"str" | "int" | "float" | "bool"``) and ``notes``."""
    meta = dict(_index()["tables"][_resolve(name)])
    meta["name"] = _resolve(name)
    meta["file"] = f"{meta['name']}.csv"
    return meta


def _parse(value: str, kind: str) -> Any:
    if value == "":
        return None
    if kind == "str":
        return value
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "bool":
        if value not in _BOOL:
            raise ValueError(f"expected Yes/No, got {value!r}")
        return _BOOL[value]
    raise ValueError(f"unknown column type {kind!r}")


def load_reference_table(name: str, raw: bool = False) -> list[dict[str, Any]]:
    """Rows of one paper table as dicts keyed by the CSV header.

    ``name`` is a CSV stem (``"table7_mistral"``, optionally with ``.csv``) or the paper's ``\\label``
    (``"tab:mistral-7b"``). With ``raw=False`` (default) cells are parsed with the column types from
    ``tables.json`` (ints, floats, ``Yes``/``No`` -> bool, empty -> ``None``); with ``raw=True`` every
    cell is the string as stored (i.e. as printed in the paper).
    """
    stem = _resolve(name)
    types = _index()["tables"][stem]["columns"]
    reader = csv.DictReader(io.StringIO(_read_text(f"{stem}.csv"), newline=""))
    if list(reader.fieldnames or []) != list(types):
        raise ValueError(f"{stem}.csv header {reader.fieldnames} does not match tables.json {list(types)}")
    rows = []
    for row in reader:
        if raw:
            rows.append(dict(row))
        else:
            rows.append({k: _parse(v, types[k]) for k, v in row.items()})
    return rows
