"""The plan of the stand-ins' regime measurement (config block ``regime``): each stand-in's target, the paper's own
2-bit QuIP# perplexity relative to its dense model for the paper model the stand-in replaces, and what the
measurement job (:mod:`caldera.experiments.jobs.regime`) needs beside the block. The selection itself is
:func:`caldera.experiments.report.regime_report.select_q_bits`."""

from __future__ import annotations

import dataclasses
from typing import Any

from caldera.experiments.planning.settings import RegimeSettings, RunContext
from caldera.experiments.planning.variants import ZERO_SHOT_TABLES
from caldera.paper_reference import load_reference_table

#: the paper's perplexity column of each ``regime.corpus``
CORPUS_COLUMN = {"wiki2": "wiki2_ppl", "c4": "c4_ppl"}


def _paper_rows(paper_model: str, corpus: str) -> tuple[str, list[dict], list[dict]] | None:
    """``(table, 2-bit QuIP# rows, unquantized rows)`` of ``paper_model`` with a ``corpus`` perplexity; None when
    no table has the model."""
    col = CORPUS_COLUMN[corpus]
    for table in ZERO_SHOT_TABLES:
        rows = [r for r in load_reference_table(table) if r["model"] == paper_model and r[col] is not None]
        if rows:
            quip = [r for r in rows if r["method"] == "QuIP#" and not r["rank"] and r["b_q"] == 2 and not r["rht_ft"]]
            return table, quip, [r for r in rows if r["method"] == "Unquantized"]
    return None


def targets_available(corpus: str = "wiki2") -> list[str]:
    """The paper models whose 2-bit QuIP# ratio on ``corpus`` the paper's tables define."""
    models = sorted({r["model"] for t in ZERO_SHOT_TABLES for r in load_reference_table(t)})
    return [m for m in models if (found := _paper_rows(m, corpus)) is not None and found[1] and found[2]]


def paper_target(paper_model: str, corpus: str = "wiki2") -> dict[str, Any]:
    """The paper's plain 2-bit QuIP# row (rank 0, no RHT fine-tuning) and unquantized row of ``paper_model``
    (Tables 1, 2 and 7) on ``corpus``: ``{"paper_model", "corpus", "table", "quip_ppl", "dense_ppl", "ratio"}``
    with ``ratio = quip_ppl / dense_ppl`` (LLaMa-2 7B on Wiki2: 8.23 / 5.12). Raises ``ValueError`` naming the
    model when a row is missing (Table 7 prints no unquantized Mistral 7B)."""
    if corpus not in CORPUS_COLUMN:
        raise ValueError(f"corpus={corpus!r}; accepted: {sorted(CORPUS_COLUMN)}")
    found = _paper_rows(paper_model, corpus)
    if found is None:
        raise ValueError(f"paper model {paper_model!r} is in none of the tables {list(ZERO_SHOT_TABLES)}")
    table, quip, dense = found
    missing = [name for name, rows in (("2-bit QuIP#", quip), ("unquantized", dense)) if not rows]
    if missing:
        raise ValueError(f"paper model {paper_model!r}: {table} prints no {' or '.join(missing)} row with "
                         f"{CORPUS_COLUMN[corpus]}, so its 2-bit QuIP# ratio is undefined; pick a model of "
                         f"{targets_available(corpus)}")
    q, d = float(quip[0][CORPUS_COLUMN[corpus]]), float(dense[0][CORPUS_COLUMN[corpus]])
    return {"paper_model": paper_model, "corpus": corpus, "table": table, "quip_ppl": q, "dense_ppl": d,
            "ratio": q / d}


def regime_errors(config: dict[str, Any]) -> list[str]:
    """Problems of the ``regime`` block the settings cannot see alone, each starting with its key: a stand-in
    that is not a key of ``models``, a ``paper_model`` it does not replace (``stand_ins``), and a paper model
    without a 2-bit QuIP# ratio on ``regime.corpus``. Empty without the block, and for a block its settings refuse
    (:class:`~caldera.experiments.planning.settings.RegimeSettings` names those problems)."""
    block = config.get("regime")
    if not block:
        return []
    try:
        settings = RegimeSettings.from_block(block)
    except ValueError:
        return []
    errors = []
    for m, entry in settings.models.items():
        where = f"regime.models.{m}"
        if m not in config["models"]:
            errors.append(f"{where}: {m!r} is not a key of models ({sorted(config['models'])})")
            continue
        if config["stand_ins"].get(entry.paper_model) != m:
            replaced = sorted(pm for pm, si in config["stand_ins"].items() if si == m)
            errors.append(f"{where}.paper_model: {entry.paper_model!r} is not a paper model {m!r} stands in for "
                          f"(stand_ins); {m!r} replaces {replaced}")
            continue
        try:
            paper_target(entry.paper_model, settings.corpus)
        except ValueError as e:
            errors.append(f"{where}.paper_model: {e}")
    return errors


@dataclasses.dataclass(frozen=True)
class RegimePlan:
    """What the regime job needs (:meth:`from_config`): the ``regime`` settings, the run (models, calibration,
    device), each stand-in's paper target (:func:`paper_target`), QuIP#'s params (``methods.quip#.params``; the
    candidates set ``q_bits`` and ``seed``) and whether evaluation uses the reconstructed Ŵ (``eval.weights``)."""

    settings: RegimeSettings
    run: RunContext
    targets: dict[str, dict[str, Any]]
    quip_params: dict[str, Any]
    reconstructed: bool

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> RegimePlan:
        if not config.get("regime"):
            raise ValueError("regime: the config has no regime block; add one (config/mini.yaml has an example)")
        settings = RegimeSettings.from_block(config["regime"])
        errors = regime_errors(config)
        if errors:
            raise ValueError("\n".join(errors))
        if config.get("calibration") is None:
            raise ValueError("regime: the held-out windows come from the calibration block, which is missing")
        quip = dict(config["methods"]["quip#"]["params"])
        bad = sorted(set(quip) & {"q_bits", "seed"})
        if bad:
            raise ValueError(f"methods.quip#.params: {bad} are set per candidate by the regime measurement "
                             "(regime.q_bits, regime.seeds); remove them")
        return cls(settings=settings, run=RunContext.from_config(config, list(settings.models)),
                   targets={m: paper_target(e.paper_model, settings.corpus) for m, e in settings.models.items()},
                   quip_params=quip,
                   reconstructed=(config.get("eval") or {}).get("weights", "compressed") == "reconstructed")

