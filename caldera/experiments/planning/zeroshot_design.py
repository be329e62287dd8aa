"""How many zero-shot documents a comparison needs, from measured per-document spreads, at 80 % power; and on
which tasks a model scores above chance at all.

A zero-shot claim compares two variants on the same documents (:func:`caldera.experiments.report.table_claims.
zeroshot_pair`: the paired correct-choice margin decides, the accuracy difference is shown). With ``n`` documents
and a per-document paired difference of standard deviation ``σ``, the 95 % interval's half-width is
``z σ / √n``; a true difference ``δ`` is resolved with 80 % power when ``√n |δ| / σ ≥ z_0.975 + z_0.8``
(:func:`documents_for_power`). The effect is the paper's own (its accuracy difference of the two rows), never a
run's outcome; ``σ`` is measured on a committed evaluation of the two variants. The realization spread is not in
it: the count is a lower bound, the seeds add to it.

A task on which the dense model does not score above chance (:func:`chance_of`; :func:`chance_reading`, the Wilson
interval) cannot show the paper's differences at any document count: its documents are better spent elsewhere.

Pure functions of per-document results (``{"doc_id", "acc", "margin"}`` per task, as
:func:`caldera.eval.zeroshot.per_document` writes them); ``benchmarks/zeroshot_design.py`` writes the record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from caldera.stats import Z95, wilson_interval

#: the power a design aims for, and the normal quantile that goes with it
POWER = 0.8
Z_POWER = 0.8416212335729143


def chance_of(rows: Sequence[Mapping[str, Any]]) -> float:
    """The accuracy a uniform guess expects on per-document rows (:func:`caldera.eval.zeroshot.per_document`, each
    with the log-likelihood ``ll`` of every choice): the mean over documents of one over their choices (WinoGrande,
    RTE and PIQA 1/2; ARC 1/4 for nearly every question)."""
    if not rows:
        raise ValueError("chance_of: no documents")
    return float(np.mean([1.0 / len(r["ll"]) for r in rows]))


def columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, list]:
    """Per-document rows as the columns the tables keep (``{"doc_id", "acc", "margin"}``)."""
    return {k: [r[k] for r in rows] for k in ("doc_id", "acc", "margin")}


def chance_reading(correct: Sequence[float], chance: float) -> dict[str, Any]:
    """Accuracy over ``correct`` (0/1 per document) with its 95 % Wilson interval against ``chance``:
    ``{"n", "acc", "lo", "hi", "chance", "reading"}``, reading "above chance" when the interval lies above it,
    "not above chance" when it contains or lies below it."""
    n, k = len(correct), int(round(sum(correct)))
    if n == 0:
        raise ValueError("chance_reading: no documents")
    lo, hi = wilson_interval(k, n)
    return {"n": n, "acc": k / n, "lo": lo, "hi": hi, "chance": chance,
            "reading": "above chance" if lo > chance else "not above chance"}


def paired_documents(a: Mapping[str, Any], b: Mapping[str, Any], key: str) -> np.ndarray:
    """``a[key] − b[key]`` on the documents both evaluated (matched by ``doc_id``), in ``a``'s order."""
    bi = {d: i for i, d in enumerate(b["doc_id"])}
    pairs = [(a[key][i], b[key][bi[d]]) for i, d in enumerate(a["doc_id"]) if d in bi]
    return np.array([x - y for x, y in pairs], dtype=float)


def documents_for_power(sd: float, effect: float | None, power_z: float = Z_POWER, most: int | None = None
                        ) -> int | None:
    """Documents at which a paired difference of per-document standard deviation ``sd`` resolves a true difference
    ``effect`` with 80 % power (``ceil(((z_0.975 + z_0.8) sd / |effect|)²)``); None without a non-zero effect or
    beyond ``most`` (the documents there are)."""
    if effect is None or effect == 0.0 or not math.isfinite(sd):
        return None
    n = max(2, math.ceil(((Z95 + power_z) * sd / abs(effect)) ** 2))
    return None if most is not None and n > most else n


def pair_design(a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]], effect: float | None,
                sizes: Mapping[str, int]) -> dict[str, Any]:
    """The documents the comparison ``a − b`` needs (per task and all tasks pooled, as the claim pools them):
    per task ``{"n", "sd_acc", "sd_margin", "mean_acc", "need_acc"}`` from the paired per-document accuracy
    difference (``need_acc``: :func:`documents_for_power` at the paper's ``effect``, None beyond the task's size in
    ``sizes``), and ``"pooled"`` the same over every task's documents (need: over all tasks together)."""
    out: dict[str, Any] = {"tasks": {}}
    pooled = []
    for task in sorted(set(a) & set(b)):
        d = paired_documents(a[task], b[task], "acc")
        m = paired_documents(a[task], b[task], "margin")
        if d.size < 2:
            continue
        pooled.append(d)
        sd = float(d.std(ddof=1))
        out["tasks"][task] = {"n": int(d.size), "sd_acc": sd, "sd_margin": float(m.std(ddof=1)),
                              "mean_acc": float(d.mean()),
                              "need_acc": documents_for_power(sd, effect, most=sizes.get(task))}
    if pooled:
        d = np.concatenate(pooled)
        sd = float(d.std(ddof=1))
        out["pooled"] = {"n": int(d.size), "sd_acc": sd, "mean_acc": float(d.mean()),
                         "need_acc": documents_for_power(sd, effect, most=sum(sizes.get(t, 0) for t in out["tasks"])
                                                         or None)}
    return out
