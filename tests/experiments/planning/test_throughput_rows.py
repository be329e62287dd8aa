"""Table 6's rows (caldera.experiments.planning.throughput_rows): each paper row's stand-in variant."""

from __future__ import annotations

from pathlib import Path

import yaml

from caldera.experiments.planning.plan import table_rows
from caldera.experiments.planning.throughput_rows import throughput_models, throughput_rows, throughput_variants

ROOT = Path(__file__).resolve().parents[3]


def _config(name):
    return yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())


def test_rows_reuse_the_zero_shot_variants():
    """mini: each 7B/70B row of Table 6 is the variant of the same (method, rank, B_LR) row of Table 1."""
    cfg = _config("mini")
    t1 = {(r["ref"]["model"], r["ref"]["method"].replace("Unquantized", "Uncompressed"), r["ref"]["rank"] or 0,
           r["ref"]["b_lr"]): r["variant"].id for r in table_rows(cfg, "table1_llama2_zeroshot")
          if r["variant"] and r["ref"]}  # extra_methods rows (ref None) are not paper rows
    rows = throughput_rows(cfg)
    assert len(rows) == 10 and all(r["variant"] is not None for r in rows)
    for r in rows:
        ref = r["ref"]
        assert r["variant"].id == t1[(ref["model"], ref["method"], ref["rank"] or 0, ref["b_lr"])]
    assert sorted(throughput_variants(cfg)) == ["smollm2-caldera-r16-lr4", "smollm2-caldera-r32-lr4",
                                                "smollm2-caldera-r8-lr16", "smollm2-caldera-r8-lr4",
                                                "smollm2-dense", "smollm2-quipsharp"]
    # one job per stand-in model times all of them, the dense one included
    assert {m: sorted(vs) for m, vs in throughput_models(cfg).items()} == {"smollm2": sorted(throughput_variants(cfg))}


def test_rows_not_compressed_by_the_run_stay_unmeasured():
    """smoke compresses only Table 7's variants: the 16-bit and rank-64 rows are not run; dense always is."""
    rows = throughput_rows(_config("smoke"))
    by = {(r["ref"]["model"], r["ref"]["method"], r["ref"]["rank"], r["ref"]["b_lr"]): r["variant"] for r in rows}
    assert by[("llama-2-7b", "CALDERA", 64, 16.0)] is None and by[("llama-2-7b", "CALDERA", 64, 4.0)] is None
    assert by[("llama-2-7b", "Uncompressed", None, None)].method == "dense"
    assert by[("llama-2-7b", "CALDERA", 128, 4.0)].id == "smollm2-caldera-r16-lr4"
