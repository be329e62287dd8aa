"""A paper-table row as a model of this run: the :class:`Variant` dataclass and the mapping of a row to it.

* the paper model (``llama-2-7b`` …) → its stand-in (``config["stand_ins"]``, e.g. SmolLM2-135M offline);
* the paper rank k at B_LR bits → the stand-in rank with the closest average bits per parameter
  (:func:`mapped_rank`: ``caldera.bits.rank_for_bits``, App. E.5 formula), so rows compare at equal bits;
* the paper method → a registered method (:func:`variant_for_row`), with its typed config built through the
  method registry (:func:`method_config`).

This module imports nothing of :mod:`caldera.experiments`: the plan (:mod:`caldera.experiments.planning.plan`), Table
5's
rows (:mod:`caldera.experiments.planning.loraft_rows`) and the config checks
(:mod:`caldera.experiments.planning.config_guard`) all
build on it, and :mod:`caldera.experiments.planning.plan` re-exports every name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from caldera.bits import CONFIG_SHAPES, MODEL_SHAPES, average_bits, rank_for_bits

#: The paper's zero-shot tables, whose rows are compressed and evaluated here.
ZERO_SHOT_TABLES = ("table1_llama2_zeroshot", "table2_llama3_zeroshot", "table7_mistral")
#: RHT fine-tuning tables (paper §5.2) -> the zero-shot table whose rows they fine-tune (same paper rows).
RHTFT_TABLES = {"table3_llama2_rhtft": "table1_llama2_zeroshot", "table4_llama3_rhtft": "table2_llama3_zeroshot"}
#: A fine-tuned variant's id is its base variant's id plus this suffix (``_safe`` ids never contain "+").
RHTFT_SUFFIX = "+rhtft"


@dataclass(frozen=True)
class Variant:
    """One compressed (or dense) model of this run."""

    id: str
    model: str  # key into config["models"]
    method: str  # registry name, or "dense"
    params: dict[str, Any] = field(default_factory=dict, hash=False)  # as written in the config (+ table's rank)
    rank: int = 0
    b_lr: int | None = None
    #: the method's typed config (``get_method(method).make_config(params)``); None for the dense model
    config: Any = field(default=None, hash=False, compare=False)
    #: a seed replicate (:func:`caldera.experiments.planning.plan.replicate_variants`): the id of the variant it
    #: realizes again, with another seed
    replicate_of: str | None = None


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", s.replace("#", "sharp")).strip("_")


#: Parameters that the paper table sets per row: a config that also sets them is refused (never overridden).
TABLE_PARAMS = {"caldera": ("rank", "l_bits", "r_bits"), "quip#": ("lr_rank",), "quip#-lr": ("lr_rank",)}


def method_config(method: str, params: dict[str, Any], where: str) -> Any:
    """The typed config of registered ``method`` from ``params`` (``None`` for ``"dense"``, which takes none);
    a bad name, preset or value raises ``ValueError`` naming ``where`` (the config key)."""
    from caldera.methods import get_method

    if method == "dense":
        if params:
            raise ValueError(f"{where}: the dense model takes no parameters; remove {sorted(params)}")
        return None
    try:
        return get_method(method).make_config(params)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: {e}") from None


def make_variant(model: str, method: str, params: dict[str, Any], rank: int, b_lr: int | None, label: str,
                 where: str = "method") -> Variant:
    vid = _safe(f"{model}-{label}" + (f"-r{rank}" if rank else "") + (f"-lr{b_lr}" if b_lr else ""))
    return Variant(vid, model, method, params, rank, b_lr, method_config(method, params, where))


def mapped_rank(config: dict[str, Any], paper_model: str, rank: int, b_lr: int) -> int:
    """:func:`rank_at_equal_bits` of ``paper_model``'s stand-in in ``config`` (``stand_ins``, the stand-in's
    ``models.<m>.shapes``, ``rank_multiple``)."""
    stand_in = config["stand_ins"][paper_model]
    return rank_at_equal_bits(config["models"][stand_in]["shapes"], paper_model, rank, b_lr,
                              int(config.get("rank_multiple", 8)))


def rank_at_equal_bits(shapes: str, paper_model: str, rank: int, b_lr: int, multiple: int) -> int:
    """The rank (a multiple of ``multiple``) of a model of ``shapes`` (a key of ``caldera.bits.CONFIG_SHAPES``)
    whose average bits per parameter (2-bit Q, ``b_lr``-bit factors, App. E.5) come closest to ``paper_model``'s
    at ``rank``; ``rank`` itself when ``shapes`` is the paper model's."""
    stand_in_shapes = CONFIG_SHAPES[shapes]
    if shapes == paper_model:
        return rank
    target = average_bits(MODEL_SHAPES[paper_model], 2, b_lr, rank)
    return rank_for_bits(stand_in_shapes, 2, b_lr, target, multiple=multiple)


def caldera_params(config: dict[str, Any], b_lr: int) -> dict[str, Any]:
    """The CALDERA rows' method params for factors of ``b_lr`` bits: ``methods.caldera.params`` updated by
    ``methods.caldera.params_by_b_lr[str(b_lr)]`` (the selection chooses the configuration per factor precision:
    the best update order and Hessian update differ between 4-bit and 16-bit factors, see selection.md)."""
    m = config["methods"]["caldera"]
    return {**m["params"], **m.get("params_by_b_lr", {}).get(str(b_lr), {})}


def variant_for_row(config: dict[str, Any], row: dict[str, Any]) -> Variant | None:
    """The variant that reproduces one paper-table row, or None if the row is outside this workflow."""
    paper_model = row["model"]
    if paper_model not in config["stand_ins"]:
        return None
    model = config["stand_ins"][paper_model]
    method = row["method"]
    rank = int(row["rank"]) if row.get("rank") not in (None, "", "0") else 0
    if method in ("Unquantized", "Uncompressed"):
        return make_variant(model, "dense", {}, 0, None, "dense")
    b_lr = int(row["b_lr"]) if row.get("b_lr") not in (None, "") else 16
    r = mapped_rank(config, paper_model, rank, b_lr) if rank else 0
    m = config["methods"]
    where = f"methods.{{}}.params (row {row['model']} {method} rank {rank} B_LR {b_lr})"
    if method == "CALDERA":
        params = {**caldera_params(config, b_lr), "rank": r, "l_bits": b_lr, "r_bits": b_lr}
        return make_variant(model, "caldera", params, r, b_lr, "caldera", where.format("caldera"))
    if method == "QuIP#" and rank:
        return make_variant(model, "quip#-lr", {**m["quip#-lr"]["params"], "lr_rank": r}, r, 16, "quipsharp-lr",
                            where.format("quip#-lr"))
    if method == "QuIP#":
        return make_variant(model, "quip#", dict(m["quip#"]["params"]), 0, None, "quipsharp", where.format("quip#"))
    return None
