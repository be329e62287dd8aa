"""Table 5's rows (LoRA fine-tuning of CALDERA's factors): which paper rows this config measures, and the
compressed models they start from.

A row (``config["lora_ft"]["rows"]``, :func:`lora_rows`) is a paper row of ``table5_finetune`` mapped to this
run's stand-in: a CALDERA row fine-tunes the compressed variant of Tables 1–2's row of the same rank and B_LR
(:func:`caldera.experiments.planning.variants.variant_for_row`), with the fine-tuned rank the paper's fraction ``r /
k`` of
the stand-in rank (:func:`caldera.finetune.lora.mapped_ft_rank`); an RHT-FT "Yes" row fine-tunes the same variant
after RHT fine-tuning (id + :data:`~caldera.experiments.planning.variants.RHTFT_SUFFIX`); a LoftQ row runs this
project's
``loftq`` method. The plan (:func:`caldera.experiments.planning.plan.all_variants`) adds the rows' starting models to
the
run's variants. The jobs are in :mod:`caldera.experiments.jobs.loraft`, the table in
:mod:`caldera.experiments.report.table5`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from caldera.bits import CONFIG_SHAPES, average_bits
from caldera.experiments.planning.settings import LoraFtRow, LoraFtSettings, LoraTaskSettings
from caldera.experiments.planning.variants import RHTFT_SUFFIX, Variant, make_variant, mapped_rank, variant_for_row
from caldera.finetune import lora

TABLE = "table5_finetune"
LM_TASK = "wiki"
CLS_TASKS = {"rte": "caldera_rte", "winogrande": "caldera_winogrande"}  # task -> zero-shot task (pairing)
TASKS = (LM_TASK, *CLS_TASKS)


@dataclass(frozen=True)
class LoraRow:
    """One measured row of Table 5: the paper row, the model it fine-tunes (``variant``: evaluated un-fine-tuned
    as the "no FT" baseline), the fine-tuned rank; ``rht_base``: for an RHT-FT "Yes" row, the compressed variant
    whose signs rule ``rht_finetune`` fine-tunes (``variant`` is then that variant under id ``+rhtft``)."""

    id: str
    ref: dict
    variant: Variant
    ft_rank: int
    avg_bits: float
    rht_base: Variant | None = None

    def checkpoint(self, results_dir: str) -> str:
        """The checkpoint the LoRA jobs start from (the workflow's path)."""
        if self.rht_base is not None:
            return f"{results_dir}/rhtft/{self.rht_base.id}/checkpoint"
        return f"{results_dir}/compressed/{self.variant.id}/checkpoint"


def ref_rows() -> list[dict[str, Any]]:
    from caldera.paper_reference import load_reference_table

    return load_reference_table(TABLE)


def _matches(ref: dict[str, Any], want: LoraFtRow) -> bool:
    """Whether paper row ``ref`` is the one ``want`` (``{model, method, rank[, b_lr, b_q, rht_ft]}``) names; a
    ``want`` without ``rht_ft`` names the row without RHT fine-tuning."""
    if ref["method"] == "CALDERA" and bool(ref.get("rht_ft")) != want.rht_ft:
        return False
    for key, val in want.as_block().items():
        if key == "rht_ft":
            continue
        if key in ("model", "method"):
            if ref.get(key) != val:
                return False
        elif ref.get(key) in (None, "") or float(ref[key]) != float(val):
            return False
    return True


def row_for(config: dict[str, Any], ref: dict[str, Any]) -> LoraRow | None:
    """The measured row for paper row ``ref`` (None: reference data, an RHT-FT row of a config without an
    ``rht_ft`` block, or not a stand-in model)."""
    pm = ref["model"]
    if pm not in config["stand_ins"]:
        return None
    model = config["stand_ins"][pm]
    shapes = CONFIG_SHAPES[config["models"][model]["shapes"]]
    mult = int(config.get("rank_multiple", 8))
    if ref["method"] == "CALDERA":
        if ref["rht_ft"] and not config.get("rht_ft"):
            return None
        v = variant_for_row(config, ref)
        r = lora.mapped_ft_rank(v.rank, int(ref["rank"]), int(ref["ft_rank"]), mult)
        # real-valued signs: not counted (as the paper)
        bits = average_bits(shapes, int(getattr(v.config, "q_bits", 2)), v.b_lr, v.rank, ft_rank=r)
        if ref["rht_ft"]:
            ft = dataclasses.replace(v, id=v.id + RHTFT_SUFFIX)
            return LoraRow(f"{ft.id}-ft{r}", ref, ft, r, bits, rht_base=v)
        return LoraRow(f"{v.id}-ft{r}", ref, v, r, bits)
    if ref["method"] == "LoftQ" and float(ref["b_q"]).is_integer() and ref.get("avg_bits") is not None:
        k = mapped_rank(config, pm, int(ref["rank"]), int(ref["b_lr"]))
        loftq = lora_settings(config).loftq
        params = {**(loftq.as_block() if loftq else {}), "bits": int(ref["b_q"]), "rank": k}
        v = make_variant(model, "loftq", params, k, 16, f"loftq{int(ref['b_q'])}", "lora_ft.loftq")
        return LoraRow(f"{v.id}-ft{k}", ref, v, k, average_bits(shapes, int(ref["b_q"]), None, k, ft_rank=k))
    return None


def lora_settings(config: dict[str, Any]) -> LoraFtSettings:
    """``config["lora_ft"]`` as its settings object."""
    return LoraFtSettings.from_block(config["lora_ft"])


def lora_rows(config: dict[str, Any]) -> list[LoraRow]:
    """The rows ``config["lora_ft"]["rows"]`` selects (``"all"``: every row this workflow can measure)."""
    if not config.get("lora_ft"):
        return []
    want = lora_settings(config).rows
    out = []
    for ref in ref_rows():
        row = row_for(config, ref)
        if row is None:
            continue
        if want == "all" or any(_matches(ref, w) for w in want):
            out.append(row)
    if want != "all":
        for w in want:
            if not any(_matches(r.ref, w) for r in out):
                raise ValueError(f"lora_ft.rows: {w.as_block()} matches no measurable row of {TABLE} (CALDERA "
                                 "rows, with rht_ft: true those with RHT-FT (needs the rht_ft block), LoftQ rows with "
                                 "whole-bit backbones, of a model in stand_ins)")
    return out


def lora_variants(config: dict[str, Any]) -> dict[str, Variant]:
    """The compressed models Table 5's rows start from (added to the run's variants, so they are compressed;
    an RHT-FT row's is its ``rht_base``, whose fine-tuned copy :func:`lora_rhtft_variants` lists)."""
    return {(r.rht_base or r.variant).id: r.rht_base or r.variant for r in lora_rows(config)}


def lora_rhtft_variants(config: dict[str, Any]) -> dict[str, tuple[Variant, Variant]]:
    """``{fine-tuned id: (RHT-fine-tuned variant, base variant)}`` of Table 5's RHT-FT rows (the form of
    :func:`caldera.experiments.planning.plan.rhtft_variants`, which adds them to Tables 3–4's)."""
    return {r.variant.id: (r.variant, r.rht_base) for r in lora_rows(config) if r.rht_base is not None}


def get_row(config: dict[str, Any], row_id: str) -> LoraRow:
    rows = {r.id: r for r in lora_rows(config)}
    if row_id not in rows:
        raise ValueError(f"no lora_ft row {row_id!r}; rows: {sorted(rows)}")
    return rows[row_id]


def task_settings(config: dict[str, Any], task: str) -> LoraTaskSettings:
    """The settings of ``lora_ft.tasks.<task>``."""
    return lora_settings(config).tasks[task]


def dense_variant_id(model: str) -> str:
    """The id of ``model``'s dense (uncompressed) variant."""
    return make_variant(model, "dense", {}, 0, None, "dense").id


