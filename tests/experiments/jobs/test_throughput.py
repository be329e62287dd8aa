"""Table 6: row mapping (planning.throughput_rows), the measurement step on a tiny checkpoint (jobs.throughput), the
table (report.table6)."""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
from pathlib import Path

import pytest
import torch
import yaml

from caldera.experiments.jobs.throughput import step_throughput, tensor_bytes
from caldera.experiments.planning.plan import table_rows
from caldera.experiments.planning.settings import RunContext, ThroughputSettings
from caldera.experiments.planning.throughput_rows import PROTOCOLS, throughput_rows, throughput_variants
from caldera.experiments.report.table6 import ThroughputTablePlan, compare_repeats, write_throughput_table

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


def test_rows_not_compressed_by_the_run_stay_unmeasured():
    """smoke compresses only Table 7's variants: the 16-bit and rank-64 rows are not run; dense always is."""
    rows = throughput_rows(_config("smoke"))
    by = {(r["ref"]["model"], r["ref"]["method"], r["ref"]["rank"], r["ref"]["b_lr"]): r["variant"] for r in rows}
    assert by[("llama-2-7b", "CALDERA", 64, 16.0)] is None and by[("llama-2-7b", "CALDERA", 64, 4.0)] is None
    assert by[("llama-2-7b", "Uncompressed", None, None)].method == "dense"
    assert by[("llama-2-7b", "CALDERA", 128, 4.0)].id == "smollm2-caldera-r16-lr4"


def test_compare_repeats_is_an_exact_rank_test():
    assert compare_repeats([5, 6, 7], [1, 2, 3])["direction"] == 1
    assert compare_repeats([1, 2, 3], [5, 6, 7])["direction"] == -1
    assert compare_repeats([1, 2, 9], [5, 6, 7])["direction"] == 0  # one repeat overlaps: not resolved
    # ranges apart by less than the margin: a rerun's drift could flip them, so not resolved either
    assert compare_repeats([10.4, 10.5], [10.0, 10.1])["direction"] == 0
    assert compare_repeats([10.4, 10.5], [10.0, 10.1], margin=0.0)["direction"] == 1
    assert compare_repeats([10.0, 10.1], [10.7, 11.0])["direction"] == -1  # 10.7 > 1.05 x 10.1
    assert compare_repeats([10.0, 10.1], [10.5, 11.0])["direction"] == 0  # 10.5 < 1.05 x 10.1
    c = compare_repeats([4.0, 4.0, 10.0], [1.0, 2.0])
    assert c["ratio"] == pytest.approx(4.0 / 1.5)
    # oracle: the fraction of the C(5, 3) rank assignments in which every A repeat beats every B repeat
    sep = sum(all(a > b for a in A for b in set(range(5)) - set(A)) for A in itertools.combinations(range(5), 3))
    assert c["p_separation"] == pytest.approx(sep / 10) and sep == 1


def test_tensor_bytes_counts_shared_tensors_once():
    m = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    m[1].weight = m[0].weight  # tied, as an LM head
    m.register_buffer("b", torch.zeros(3, dtype=torch.float16))
    assert tensor_bytes(m) == 10 * 4 * 4 + 3 * 2


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A dense tiny LLaMA folder and its QuIP# checkpoint (tests/pipeline/test_checkpoint.py's helpers)."""
    from caldera.pipeline.checkpoint import save_compressed
    from tests.helpers import word_tokenizer
    from tests.pipeline.test_checkpoint import compress_in_place, tiny_llama

    tmp = tmp_path_factory.mktemp("tp")
    dense = tiny_llama()
    dense.save_pretrained(tmp / "dense")
    word_tokenizer().save_pretrained(tmp / "dense")
    model, mcfg = compress_in_place(tiny_llama())
    ck = save_compressed(model, tmp / "ck", method="quip#", method_config=dataclasses.asdict(mcfg),
                         tokenizer=word_tokenizer())
    cfg = {"name": "t", "device": "cpu", "models": {"tiny": {"source": str(tmp / "dense"), "label": "tiny"}},
           "throughput": {"runs": 3, "warmup": 1, "new_tokens": 3, "calls": 2, "kernel": "reference",
                          "prompt": "w5 w9 w33"}}
    return tmp, cfg, ck


@pytest.mark.parametrize("method", ["dense", "quip#"])
def test_step_throughput_records_every_repeat(tiny_run, method):
    from caldera.experiments.planning.plan import Variant

    tmp, cfg, ck = tiny_run
    v = Variant(f"tiny-{method}", "tiny", method)
    out = tmp / f"{method}.json"
    res = step_throughput(ThroughputSettings.from_block(cfg["throughput"]), RunContext.from_config(cfg), v,
                          None if method == "dense" else str(ck), str(out), torch_threads=1)
    assert json.loads(out.read_text())["variant"] == v.id
    for proto, per in (("decode", 3), ("single_token", 2)):
        r = res[proto]
        assert len(r["tokens_per_s"]) == len(r["times_s"]) == 3
        assert [t * s for t, s in zip(r["tokens_per_s"], r["times_s"])] == pytest.approx([per] * 3)
        assert r["min"] <= r["median"] <= r["max"]
    assert res["torch_threads"] == 1 and res["peak_rss_mb"] > 0
    # what the job records is what it measured with: not the claims' margin, which changes no measurement
    assert "separation_margin" not in res["settings"] and res["settings"]["runs"] == 3
    if method != "dense":
        assert res["kernel_backends"] == ["None"]  # kernel=reference: every layer took the reference path


def _fake(variant: str, tps: float, spread: float = 0.1) -> dict:
    rep = [tps * (1 + spread * d) for d in (-1, -0.5, 0, 0.5, 1)]
    r = {"tokens_per_s": rep, "median": tps, "min": min(rep), "max": max(rep)}
    return {"variant": variant, "device": "cpu", "torch_threads": 1, "peak_rss_mb": 900.0, "peak_cuda_mb": None,
            "model_tensor_mb": 100.0 + tps, **{p: dict(r) for p in PROTOCOLS}}


def test_table_has_the_papers_numbers_beside_ours(tmp_path):
    cfg = _config("mini")
    speeds = {"smollm2-dense": 10.0, "smollm2-caldera-r8-lr16": 6.0, "smollm2-caldera-r8-lr4": 5.0,
              "smollm2-caldera-r16-lr4": 5.0, "smollm2-caldera-r32-lr4": 4.5, "smollm2-quipsharp": 7.0}
    (tmp_path / "throughput").mkdir()
    for v, s in speeds.items():
        (tmp_path / "throughput" / f"{v}.json").write_text(json.dumps(_fake(v, s)))
    outs = [tmp_path / f"t6.{e}" for e in ("md", "tex", "csv", "json")]
    tab = write_throughput_table(str(tmp_path), ThroughputTablePlan.from_config(cfg), *map(str, outs))
    md = outs[0].read_text()
    assert "| CALDERA (7B) | llama-2-7b → SmolLM2" in md and "| 61.68 | 6.00 [5.40, 6.60] |" in md
    assert "| OOM |" in md  # 70B uncompressed: the paper's OOM, ours measured on the stand-in
    rows = list(csv.DictReader(io.StringIO(outs[2].read_text())))
    assert len(rows) == 10 and float(rows[0]["single_token_median"]) == 10.0 and rows[0]["tok_per_s_paper"] == "31.75"
    # each row's own model-tensor and peak-memory figures (not another variant's)
    assert [float(r["model_tensor_mb"]) for r in rows[:2]] == [110.0, 106.0] and rows[0]["peak_memory_mb"] == "900.0"
    assert "| 110 | 900 |" in md
    assert set(json.loads(outs[3].read_text())["measured"]) == set(speeds)
    assert len(tab["rows"]) == 10
