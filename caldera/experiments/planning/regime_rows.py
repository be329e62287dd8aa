"""Rows of a run compressed again in each stand-in's own regime (config ``regime.run``).

The regime of a stand-in is the Q bits at which its QuIP# loses, on held-out calibration text, what the paper's
QuIP# loses at 2 bits (``regime.models.<m>.q_bits``, chosen by :mod:`caldera.experiments.jobs.regime`). Where that
is not 2 bits, ``regime.run`` names variants of this run to compress again at those bits and zero-shot tables to
show again with them:

* a regime variant is the 2-bit variant with ``q_bits`` set to the regime's bits and ``regime.run.params`` of its
  method on top (:func:`regime_variant`); its id is the 2-bit id plus ``-q<bits>``, so both live in one run,
  share the Hessians and, on the same seeds, the seed block of the paired comparisons;
* a regime table ``<table>_regime`` holds the paper table's rows whose 2-bit variant has a regime variant, the
  dense rows (the same dense model), and nothing else (:func:`regime_table_rows`); its claims are decided like the
  2-bit table's and set beside them (:mod:`caldera.experiments.report.regime_claims`).

A stand-in whose regime is 2 bits needs no regime rows: its 2-bit rows are its regime rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from caldera.experiments.planning.variants import ZERO_SHOT_TABLES, Variant, method_config

#: a regime table's name is its paper table's plus this suffix
REGIME_TABLE_SUFFIX = "_regime"
#: a regime table's paper row whose variant is not compressed again at the regime's bits
NOT_IN_REGIME = "not compressed at the regime's bits here (regime.run.variants)"


def is_regime_table(table: str) -> bool:
    return table.endswith(REGIME_TABLE_SUFFIX)


def base_table(table: str) -> str:
    """The paper table a (regime or plain) table name shows: ``table1_llama2_zeroshot_regime`` →
    ``table1_llama2_zeroshot``."""
    return table.removesuffix(REGIME_TABLE_SUFFIX)


def _run(config: dict[str, Any]) -> dict[str, Any] | None:
    return (config.get("regime") or {}).get("run")


def regime_bits(config: dict[str, Any], model: str) -> int | None:
    """Stand-in ``model``'s regime Q bits when they are not 2 (``regime.models.<model>.q_bits``); None otherwise
    (no regime measured, or 2 bits: the run's own rows are the regime's)."""
    entry = ((config.get("regime") or {}).get("models") or {}).get(model) or {}
    q = entry.get("q_bits")
    return int(q) if q not in (None, 2) else None


def regime_tables(config: dict[str, Any]) -> list[str]:
    """The regime tables of this run: ``<table>_regime`` for each table of ``regime.run.tables``; empty without a
    ``regime.run`` block."""
    run = _run(config)
    return [t + REGIME_TABLE_SUFFIX for t in run["tables"]] if run else []


def regime_variant(config: dict[str, Any], v: Variant) -> Variant | None:
    """The regime variant of the 2-bit variant ``v``: None unless ``v.id`` is in ``regime.run.variants`` and its
    stand-in's regime is not 2 bits. Its parameters are ``v``'s with ``regime.run.params[<method>]`` and
    ``q_bits`` set; its id ``<v.id>-q<bits>``."""
    run = _run(config)
    q = regime_bits(config, v.model)
    if not run or q is None or v.id not in run["variants"] or v.method == "dense":
        return None
    params = {**v.params, **(run.get("params") or {}).get(v.method, {}), "q_bits": q}
    where = f"regime.run.params.{v.method} (variant {v.id} at Q {q} bits)"
    return dataclasses.replace(v, id=f"{v.id}-q{q}", params=params, config=method_config(v.method, params, where))


def _is_regime_id(config: dict[str, Any], vid: str, model: str) -> bool:
    run = _run(config)
    q = regime_bits(config, model)
    return bool(run) and q is not None and any(vid == f"{b}-q{q}" for b in run["variants"])


def regime_zeroshot_limit(config: dict[str, Any], v: Variant) -> dict[str, int | None] | None:
    """The zero-shot documents per task of regime variant ``v`` (or of a seed replicate of one, when
    ``regime.run.zeroshot.replicates``) under ``regime.run.zeroshot.limit``: every task of ``eval.zeroshot.tasks``
    (full names), at the documents the block names or else ``eval.zeroshot.limit``; None for any other variant
    or without the block (the evaluation then takes ``eval.zeroshot.limit``)."""
    from caldera.eval.zeroshot import task_name, task_names

    zs = (_run(config) or {}).get("zeroshot")
    if not zs or not _is_regime_id(config, v.replicate_of or v.id, v.model):
        return None
    if v.replicate_of is not None and not zs.get("replicates", False):
        return None
    named = {task_name(t): n for t, n in zs["limit"].items()}
    base = config["eval"]["zeroshot"].get("limit")
    return {t: named.get(t, base) for t in task_names(config["eval"]["zeroshot"]["tasks"])}


def regime_table_rows(config: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of a regime table from its paper table's ``rows`` (:func:`caldera.experiments.planning.plan.table_rows`
    of the 2-bit table): each paper row keeps its dense variant, takes its compressed variant's regime variant, or
    is marked not run in the regime; rows that are not paper rows (``extra_methods``) are left out."""
    out = []
    for row in rows:
        if row.get("ref") is None:
            continue
        v = row["variant"]
        if v is None or v.method == "dense":
            out.append({"ref": row["ref"], "variant": v})
            continue
        r = regime_variant(config, v)
        out.append({"ref": row["ref"], "variant": r} if r is not None else
                   {"ref": row["ref"], "variant": None, "pending": NOT_IN_REGIME})
    return out


def regime_errors(config: dict[str, Any], variants: dict[str, Variant]) -> list[str]:
    """Problems of ``regime.run`` against this run, each naming its key: a table that is not a zero-shot table of
    ``tables``, a variant id that is not a compressed variant of the run, or one whose stand-in's regime is 2 bits
    (its 2-bit row is its regime row) or not measured. ``variants``: the run's 2-bit variants."""
    run = _run(config)
    if not run:
        return []
    errors = []
    own = [t for t in config["tables"] if t in ZERO_SHOT_TABLES]
    for i, t in enumerate(run["tables"]):
        if t not in own:
            errors.append(f"regime.run.tables[{i}]: {t!r} is not a zero-shot table of this run's tables ({own})")
    compressed = sorted(vid for vid, v in variants.items() if v.method != "dense" and v.replicate_of is None)
    for i, vid in enumerate(run["variants"]):
        where = f"regime.run.variants[{i}]"
        if vid not in variants or variants[vid].method == "dense":
            errors.append(f"{where}: {vid!r} is not a compressed variant of this run; accepted: {compressed}")
            continue
        model = variants[vid].model
        q = ((config.get("regime") or {}).get("models") or {}).get(model, {}).get("q_bits")
        if q is None:
            errors.append(f"{where}: {vid!r}: stand-in {model!r} has no regime bits (regime.models.{model}.q_bits); "
                          "measure them (python -m caldera.experiments.jobs.regime) or remove the variant")
        elif int(q) == 2:
            errors.append(f"{where}: {vid!r}: stand-in {model!r}'s regime is 2 bits, so its 2-bit row is its regime "
                          "row; remove the variant")
    for method in (run.get("params") or {}):
        if not any(variants[vid].method == method for vid in run["variants"] if vid in variants):
            errors.append(f"regime.run.params.{method}: no variant of regime.run.variants uses method {method!r}")
    from caldera.eval.zeroshot import task_name, task_names

    try:
        evaluated = task_names(config["eval"]["zeroshot"]["tasks"])
    except ValueError:  # an unknown task: check_config names it
        evaluated = []
    for t in ((run.get("zeroshot") or {}).get("limit") or {}):
        if task_name(t) not in evaluated:
            errors.append(f"regime.run.zeroshot.limit.{t}: not a task of eval.zeroshot.tasks ({evaluated}); add it "
                          "there or remove it here")
    return errors


def same_regime_tables(config: dict[str, Any]) -> list[str]:
    """The zero-shot tables of ``tables`` whose every stand-in's regime is 2 bits (``regime.models.<m>.q_bits``):
    the run's own tables are their regime tables. Empty without ``regime.run``."""
    if not _run(config):
        return []
    from caldera.paper_reference import load_reference_table

    models = (config.get("regime") or {}).get("models") or {}
    out = []
    for t in (t for t in config["tables"] if t in ZERO_SHOT_TABLES):
        stand = {config["stand_ins"][r["model"]] for r in load_reference_table(t) if r["model"] in config["stand_ins"]}
        if stand and all((models.get(m) or {}).get("q_bits") == 2 for m in stand):
            out.append(t)
    return out
