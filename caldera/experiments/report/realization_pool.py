"""Pooled realization spread: the between-seed variance of a method family on one stand-in, for variants run once.

A compressed model is one realization of a random procedure; a comparison needs its spread
(:mod:`caldera.stats`). A run cannot replicate every variant, but like variants on one stand-in (CALDERA with
4-bit factors at several ranks, say) spread alike, so the run's replicated variants give a **pooled** between-seed
variance of Wiki2 log perplexity per ``(family, factor precision, stand-in)``: the same method family and the same
B_LR (plain QuIP# and QuIP# + LR are apart: their seed variances differ 11× on SmolLM2; so are CALDERA's 4- and
16-bit factors):
``s_p² = Σ_v (S_v − 1) s_v² / Σ_v (S_v − 1)`` with ``Σ_v (S_v − 1)`` degrees of freedom
(:func:`caldera.stats.pooled_variance`). A random variant with one seed then enters an interval with ``s_p²`` in
place of its unknown own variance (:func:`caldera.stats.seed_half_width`). The family is the method's
(:attr:`caldera.methods.registry.MethodSpec.family`): RHT-fine-tuned variants count in their base's family.
Whether the pooled intervals cover held-out realizations is measured on committed replicates by
:func:`caldera.experiments.report.split_coverage.pooled_split_coverage`.

A **seed block** (:func:`blocks`) is the other use of the replicates: the random variants of one stand-in that ran
on the same seeds. Realization s of each shares RHT signs and sketches, so comparisons pair on the seeds, and the
additive variant + seed model over every variant of the block (:func:`caldera.stats.block_variance`) gives the
variance of a per-seed difference with ``(V − 1)(S − 1)`` degrees of freedom
(:func:`caldera.experiments.report.tables.ppl_ratio`).

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


def _bits_of(table: dict[str, Any], variant: str) -> str:
    r = _row_of(table, variant)
    b = None if r is None else r.get("b_lr")
    return "—" if b in (None, "", "—") else str(int(float(b)) if float(b).is_integer() else float(b))


def _replicated(tables: dict[str, dict[str, Any]], corpus: str) -> dict[str, tuple[tuple, list, np.ndarray]]:
    """Every random variant with two or more seeds on ``corpus``, once: ``{variant: ((family, B_LR, stand-in),
    seeds, per-seed log perplexity)}``."""
    seen: dict[str, tuple[tuple, list, np.ndarray]] = {}
    for tab in tables.values():
        for vid, info in tab.get("realizations", {}).items():
            if vid in seen or not info.get("random") or len(info.get("seeds", [])) < 2:
                continue
            fam, stand = family_of(tab, vid), stand_in_of(tab, vid)
            logs = per_seed_log_ppl(tab, vid, corpus)
            if fam is None or stand is None or logs is None or logs.size < 2:
                continue
            seen[vid] = ((fam, _bits_of(tab, vid), stand), list(info["seeds"])[:logs.size], logs)
    return seen


def pools(tables: dict[str, dict[str, Any]], corpus: str = "wiki") -> dict[tuple[str, str, str], dict[str, Any]]:
    """``{(family, B_LR, stand-in label): {"var", "df", "variants", "family", "b_lr", "stand_in"}}`` from every
    random variant of ``tables`` with at least two seeds on ``corpus`` (each variant counted once, however many
    tables hold it): only like variants pool (one method family, one factor precision)."""
    seen = _replicated(tables, corpus)
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for key in sorted({k for k, _, _ in seen.values()}):
        members = sorted(v for v, (k, _, _) in seen.items() if k == key)
        p = stats.pooled_variance([seen[v][2] for v in members])
        if p is not None:
            out[key] = {**p, "variants": members, "family": key[0], "b_lr": key[1], "stand_in": key[2]}
    return out


def blocks(tables: dict[str, dict[str, Any]], corpus: str = "wiki") -> dict[str, dict[str, Any]]:
    """``{stand-in label: {"var", "df", "variants", "seeds"}}``: per stand-in, the seed block of its replicated
    random variants (two or more seeds on ``corpus``) on the seeds that every one of them holds
    (:func:`caldera.stats.block_variance`, the additive variant + seed model); a stand-in without two such
    variants sharing two seeds has none."""
    seen = _replicated(tables, corpus)
    out: dict[str, dict[str, Any]] = {}
    for stand in sorted({k[2] for k, _, _ in seen.values()}):
        members = sorted(v for v, (k, _, _) in seen.items() if k[2] == stand)
        shared = [s for s in seen[members[0]][1] if all(s in seen[v][1] for v in members)]
        if len(members) < 2 or len(shared) < 2:
            continue
        Y = [[seen[v][2][seen[v][1].index(s)] for s in shared] for v in members]
        b = stats.block_variance(Y)
        out[stand] = {**b, "variants": members, "seeds": shared}
    return out


def attach_pools(tables: dict[str, dict[str, Any]], corpus: str = "wiki") -> dict[str, dict[str, Any]]:
    """``tables`` (shallow copies) each with ``"pooled_spread": {variant: pool}`` for its random variants that
    have one realization on ``corpus`` and a pool of their ``(family, B_LR, stand-in)`` (:func:`pools`), and
    ``"seed_block": {stand-in: block}`` (:func:`blocks`); :func:`caldera.experiments.report.tables.ppl_ratio`
    reads both."""
    found, blk = pools(tables, corpus), blocks(tables, corpus)
    out = {}
    for name, tab in tables.items():
        attached = {}
        for vid, info in tab.get("realizations", {}).items():
            if not info.get("random"):
                continue
            logs = per_seed_log_ppl(tab, vid, corpus)
            if logs is None or logs.size != 1:
                continue
            p = found.get((family_of(tab, vid), _bits_of(tab, vid), stand_in_of(tab, vid)))
            if p is not None:
                attached[vid] = p
        out[name] = {**tab, "pooled_spread": attached, "seed_block": blk}
    return out
