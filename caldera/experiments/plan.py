"""From a workflow config to the set of models to compress and evaluate for every paper table.

Each row of a paper table (``caldera.paper_tables``) is mapped to a *variant* of this run:

* the paper model (``llama-2-7b`` …) → its stand-in (``config["stand_ins"]``, e.g. SmolLM2-135M offline);
* the paper rank k at B_LR bits → the stand-in rank with the closest average bits per parameter
  (``caldera.bits.rank_for_bits``, App. E.5 formula), so rows compare at equal bits;
* the paper method → a registered method: CALDERA → ``caldera``, QuIP# (rank 0) → ``quip#``, QuIP# with a
  16-bit low-rank part → ``quip#-lr``, Unquantized → the dense model.

``config["extra_methods"]`` adds rows for any other registered method to every zero-shot table, so a new
method enters the tables by editing config only. Variant ids are filesystem-safe strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from caldera.bits import MODEL_SHAPES, average_bits, rank_for_bits
from caldera.paper_tables import load_reference_table

ZERO_SHOT_TABLES = ("table1_llama2_zeroshot", "table2_llama3_zeroshot", "table7_mistral")
PENDING_TABLES = {
    "table3_llama2_rhtft": "RHT fine-tuning (its own issue)",
    "table4_llama3_rhtft": "RHT fine-tuning (its own issue)",
    "table5_finetune": "LoRA fine-tuning (its own issue)",
    "table6_throughput": "generation throughput table (its own issue)",
}


@dataclass(frozen=True)
class Variant:
    """One compressed (or dense) model of this run."""

    id: str
    model: str  # key into config["models"]
    method: str  # registry name, or "dense"
    params: dict[str, Any] = field(default_factory=dict, hash=False)
    rank: int = 0
    b_lr: int | None = None


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", s.replace("#", "sharp")).strip("_")


def make_variant(model: str, method: str, params: dict[str, Any], rank: int, b_lr: int | None, label: str) -> Variant:
    vid = _safe(f"{model}-{label}" + (f"-r{rank}" if rank else "") + (f"-lr{b_lr}" if b_lr else ""))
    return Variant(vid, model, method, params, rank, b_lr)


def mapped_rank(config: dict[str, Any], paper_model: str, rank: int, b_lr: int) -> int:
    stand_in = config["stand_ins"][paper_model]
    shapes = MODEL_SHAPES[config["models"][stand_in]["shapes"]]
    if config["models"][stand_in]["shapes"] == paper_model:
        return rank
    target = average_bits(MODEL_SHAPES[paper_model], 2, b_lr, rank)
    return rank_for_bits(shapes, 2, b_lr, target, multiple=int(config.get("rank_multiple", 8)))


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
    if method == "CALDERA":
        params = {**m["caldera"]["params"], "rank": r, "l_bits": b_lr, "r_bits": b_lr}
        return make_variant(model, "caldera", params, r, b_lr, "caldera")
    if method == "QuIP#" and rank:
        return make_variant(model, "quip#-lr", {**m["quip#-lr"]["params"], "lr_rank": r}, r, 16, "quipsharp-lr")
    if method == "QuIP#":
        return make_variant(model, "quip#", dict(m["quip#"]["params"]), 0, None, "quipsharp")
    return None


def table_rows(config: dict[str, Any], table: str) -> list[dict[str, Any]]:
    """Reference rows of a zero-shot table with their variant (None: not run here) plus the extra rows."""
    rows = []
    keep = config.get("paper_ranks")  # optional: run only rows with these paper ranks (rank-0 rows always run)
    for ref in load_reference_table(table):
        v = variant_for_row(config, ref)
        if keep is not None and v is not None and v.rank and int(ref["rank"]) not in keep:
            v = None
        rows.append({"ref": ref, "variant": v})
    stand_ins = sorted({config["stand_ins"][r["ref"]["model"]] for r in rows if r["variant"] is not None})
    for extra in config.get("extra_methods", []):
        for model in stand_ins:
            v = make_variant(model, extra["method"], dict(extra.get("params", {})), 0, None, extra["name"])
            rows.append({"ref": None, "variant": v, "label": extra["name"]})
    return rows


def all_variants(config: dict[str, Any]) -> dict[str, Variant]:
    out: dict[str, Variant] = {}
    for table in config["tables"]:
        for row in table_rows(config, table):
            if row["variant"] is not None:
                out[row["variant"].id] = row["variant"]
    return out
