"""Table 6's rows (paper §5.4, batch-1 generation throughput): which paper rows this run measures, as variants of
the run (:func:`caldera.experiments.planning.plan.variant_for_row`, the mapping of Tables 1/2/7), and the throughput
settings, with the keys that moved to the SLURM profile refused.

The paper's rows map to variants of this run the way Tables 1/2/7 map theirs (paper model → stand-in, paper rank →
the stand-in rank with the closest average bits), so Table 6 reuses the checkpoints the zero-shot tables already
compress; a row whose variant this run does not compress stays "not run in this config". The dense stand-in needs
no compression and is always measured. The paper's 70B rows map to the same stand-in variants as the 70B rows of
Table 1. The variants of one stand-in model are timed together, in one job (:func:`throughput_models`).
"""

from __future__ import annotations

from typing import Any

from caldera.experiments.planning.plan import Variant, all_variants, variant_for_row
from caldera.experiments.planning.settings import ThroughputSettings

TABLE = "table6_throughput"


PROTOCOLS = ("single_token", "decode")  # the first one is the paper's (authors' eval_throughput notebook)


PROTOCOL_LABEL = {"single_token": "single-token forward (paper's protocol)", "decode": "generate, KV cache"}


#: machine settings that moved from the config's ``throughput:`` block to the profiles
MOVED_TO_PROFILES = {
    "threads": "the timed loops' torch threads are the throughput job's `torch_threads` resource (default 1): "
               "set it in a profile, `set-resources: {throughput: {torch_threads: N}}`",
    "exclusive": "the throughput job reserves every core of the run by default (nothing runs beside the timed "
                 "loops); a profile changes that with `set-threads: {throughput: N}`",
}


def moved_settings(config: dict[str, Any]) -> list[str]:
    """One message per key ``config["throughput"]`` still carries that it no longer accepts: a machine setting
    (:data:`MOVED_TO_PROFILES`) or a removed key (``ThroughputSettings.REMOVED``). The workflow refuses such a
    config, saying where the setting went or what replaces it."""
    tp = config.get("throughput") or {}
    if not isinstance(tp, dict):
        return []
    return ([f"throughput.{k}: no longer a config key (machine settings live in the profiles): {why}"
             for k, why in MOVED_TO_PROFILES.items() if k in tp]
            + [f"throughput.{k}: {why}" for k, why in ThroughputSettings.REMOVED.items() if k in tp])


def throughput_settings(config: dict[str, Any]) -> ThroughputSettings:
    """``config["throughput"]`` as its settings object (the block is optional: every key has its default in
    :class:`~caldera.experiments.planning.settings.ThroughputSettings`)."""
    return ThroughputSettings.from_block(config.get("throughput"))


def throughput_rows(config: dict[str, Any], run_variants: dict[str, Variant] | None = None) -> list[dict[str, Any]]:
    """The paper's Table 6 rows, each ``{"ref": paper row, "variant": Variant or None}``: None when the row's
    stand-in variant is not compressed by this run (``run_variants``, default :func:`all_variants`) or its paper
    model has no stand-in. The dense row is always measured (it needs no compression)."""
    from caldera.paper_reference import load_reference_table

    run_variants = all_variants(config) if run_variants is None else run_variants
    rows = []
    for ref in load_reference_table(TABLE):
        v = variant_for_row(config, ref)
        if v is not None and v.method != "dense" and v.id not in run_variants:
            v = None
        rows.append({"ref": ref, "variant": v})
    return rows


def throughput_variants(config: dict[str, Any], run_variants: dict[str, Variant] | None = None) -> dict[str, Variant]:
    """The distinct variants Table 6 measures, by id."""
    return {r["variant"].id: r["variant"] for r in throughput_rows(config, run_variants) if r["variant"]}


def throughput_models(config: dict[str, Any], run_variants: dict[str, Variant] | None = None
                      ) -> dict[str, dict[str, Variant]]:
    """Table 6's variants grouped by their model (stand-in): ``{model: {variant id: Variant}}``, ids sorted.
    One workflow job per model times all of its variants together, the dense one included, in interleaved
    rounds (:mod:`caldera.experiments.jobs.throughput`); a claim compares variants of one model only."""
    out: dict[str, dict[str, Variant]] = {}
    for vid, v in sorted(throughput_variants(config, run_variants).items()):
        out.setdefault(v.model, {})[vid] = v
    return dict(sorted(out.items()))
