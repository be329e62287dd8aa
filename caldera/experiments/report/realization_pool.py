"""Pooled realization spread: the between-seed variance of a method family on one stand-in, for variants run once.

A compressed model is one realization of a random procedure; a comparison needs its spread
(:mod:`caldera.stats`). A run cannot replicate every variant, but variants of one method family on one stand-in
(CALDERA at several ranks, say) spread alike, so the run's replicated variants give a **pooled** between-seed
variance of Wiki2 log perplexity per ``(family, stand-in)``:
``s_p² = Σ_v (S_v − 1) s_v² / Σ_v (S_v − 1)`` with ``Σ_v (S_v − 1)`` degrees of freedom
(:func:`caldera.stats.pooled_variance`). A random variant with one seed then enters an interval with ``s_p²`` in
place of its unknown own variance (:func:`caldera.stats.seed_half_width`). The family is the method's
(:attr:`caldera.methods.registry.MethodSpec.family`): RHT-fine-tuned variants count in their base's family.
Whether the pooled intervals cover held-out realizations is measured on committed replicates by
:func:`caldera.experiments.report.split_coverage.pooled_split_coverage`.

Pure functions of table JSONs (:mod:`caldera.experiments.report.tables`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caldera import stats

#: the method label a table row starts with → the family of tables written before realizations named it
LABEL_FAMILIES = (("CALDERA", "caldera"), ("QuIP#", "quip#"), ("Unquantized", "dense"), ("Uncompressed", "dense"))


def _row_of(table: dict[str, Any], variant: str) -> dict[str, Any] | None:
    for r in table.get("rows", []):
        if variant in (r.get("variant"), r.get("base_variant")):
            return r
    return None


def family_of(table: dict[str, Any], variant: str) -> str | None:
    """The realization family of ``variant`` in ``table``: as its ``realizations`` entry records it, else from
    its row's method label (:data:`LABEL_FAMILIES`); None when neither says."""
    info = table.get("realizations", {}).get(variant) or {}
    if info.get("family"):
        return info["family"]
    r = _row_of(table, variant)
    if r is None:
        return None
    label = str(r.get("method", ""))
    return next((f for prefix, f in LABEL_FAMILIES if label.startswith(prefix)), None)


def stand_in_of(table: dict[str, Any], variant: str) -> str | None:
    r = _row_of(table, variant)
    return None if r is None else r.get("stand_in")


def per_seed_log_ppl(table: dict[str, Any], variant: str, corpus: str = "wiki") -> np.ndarray | None:
    """Per-seed log perplexity of ``variant`` on ``corpus`` (``(S,)``, in seed order), or None without windows."""
    from caldera.experiments.report.tables import realizations

    r = realizations(table, variant, corpus)
    if r is None:
        return None
    nll = np.asarray(r["nll"], dtype=np.float64)
    return nll.sum(axis=1) / float(np.sum(r["tokens"]))


def pools(tables: dict[str, dict[str, Any]], corpus: str = "wiki") -> dict[tuple[str, str], dict[str, Any]]:
    """``{(family, stand-in label): {"var", "df", "variants"}}`` from every random variant of ``tables`` with at
    least two seeds on ``corpus`` (each variant counted once, however many tables hold it)."""
    seen: dict[str, tuple[tuple[str, str], np.ndarray]] = {}
    for tab in tables.values():
        for vid, info in tab.get("realizations", {}).items():
            if vid in seen or not info.get("random") or len(info.get("seeds", [])) < 2:
                continue
            fam, stand = family_of(tab, vid), stand_in_of(tab, vid)
            logs = per_seed_log_ppl(tab, vid, corpus)
            if fam is None or stand is None or logs is None or logs.size < 2:
                continue
            seen[vid] = ((fam, stand), logs)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for key in sorted({k for k, _ in seen.values()}):
        members = sorted(v for v, (k, _) in seen.items() if k == key)
        p = stats.pooled_variance([seen[v][1] for v in members])
        if p is not None:
            out[key] = {**p, "variants": members, "family": key[0], "stand_in": key[1]}
    return out


def attach_pools(tables: dict[str, dict[str, Any]], corpus: str = "wiki") -> dict[str, dict[str, Any]]:
    """``tables`` (shallow copies) each with ``"pooled_spread": {variant: pool}`` for its random variants that
    have one realization on ``corpus`` and a pool of their ``(family, stand-in)`` (:func:`pools`);
    :func:`caldera.experiments.report.tables.ppl_ratio` reads it."""
    found = pools(tables, corpus)
    out = {}
    for name, tab in tables.items():
        attached = {}
        for vid, info in tab.get("realizations", {}).items():
            if not info.get("random"):
                continue
            logs = per_seed_log_ppl(tab, vid, corpus)
            if logs is None or logs.size != 1:
                continue
            p = found.get((family_of(tab, vid), stand_in_of(tab, vid)))
            if p is not None:
                attached[vid] = p
        out[name] = {**tab, "pooled_spread": attached}
    return out
