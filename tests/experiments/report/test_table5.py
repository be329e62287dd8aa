"""Table 5 from a config (caldera.experiments.report.table5): row statuses, starting checkpoints, no-FT baselines
(no model needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from caldera.experiments.planning.loraft_rows import lora_rows
from caldera.experiments.report.table5 import Table5Plan, build_table5

ROOT = Path(__file__).resolve().parents[3]


def _mini():
    return yaml.safe_load((ROOT / "config/mini.yaml").read_text())


def test_table_statuses_without_results(tmp_path):
    tab = build_table5(tmp_path, Table5Plan.from_config(_mini()))
    st = [r["status"] for r in tab["rows"]]
    assert st.count("measured") == 1 and sum(s.startswith("measured with this project") for s in st) == 1
    assert any(s.startswith("pending in mini") for s in st)
    rht = [r for r in tab["rows"] if r["paper"]["rht_ft"]]
    assert len(rht) == 8 and all(r["status"].startswith("pending in mini") and "+rhtft" in r["row"] for r in rht)
    lq = [r for r in tab["rows"] if r["paper"]["method"] == "LQ-LoRA"]
    assert lq and all(r["status"].startswith("reference") for r in lq)
    measured = next(r for r in tab["rows"] if r["status"] == "measured")
    assert measured["wiki"] is None  # no result file: nothing invented


def _rht_cfg():
    cfg = _mini()
    cfg["lora_ft"]["rows"] = [{"model": "llama-2-7b", "method": "CALDERA", "rank": 128, "b_lr": 4, "rht_ft": True},
                              {"model": "llama-2-7b", "method": "CALDERA", "rank": 128, "b_lr": 4}]
    return cfg


def test_rht_ft_row_starts_from_the_rht_finetuned_checkpoint():
    """An `rht_ft: true` row fine-tunes the RHT-FT checkpoint of the same variant (rule rht_finetune's output),
    under the Tables 3-4 id `+rhtft`; the compression variant stays the base, which rhtft_variants pairs with
    the fine-tuned id (so rule `evaluate` scores its no-FT model); an entry without rht_ft names the No row."""
    from caldera.experiments.planning.loraft_rows import lora_variants
    from caldera.experiments.planning.plan import all_variants, rhtft_variants
    from caldera.experiments.report.table5 import lora_inputs

    cfg = _rht_cfg()
    rows = {r.id: r for r in lora_rows(cfg)}
    assert set(rows) == {"smollm2-caldera-r16-lr4+rhtft-ft8", "smollm2-caldera-r16-lr4-ft8"}
    yes, no = rows["smollm2-caldera-r16-lr4+rhtft-ft8"], rows["smollm2-caldera-r16-lr4-ft8"]
    assert yes.ref["rht_ft"] is True and no.ref["rht_ft"] is False and no.rht_base is None
    assert yes.rht_base == no.variant and yes.variant.id == no.variant.id + "+rhtft"
    assert yes.variant.config == no.variant.config and (yes.ft_rank, yes.avg_bits) == (no.ft_rank, no.avg_bits)
    assert yes.checkpoint("R") == "R/rhtft/smollm2-caldera-r16-lr4/checkpoint"
    assert no.checkpoint("R") == "R/compressed/smollm2-caldera-r16-lr4/checkpoint"
    assert set(lora_variants(cfg)) == {"smollm2-caldera-r16-lr4"}
    assert "smollm2-caldera-r16-lr4" in all_variants(cfg) and not any("+" in v for v in all_variants(cfg))
    assert rhtft_variants(cfg)["smollm2-caldera-r16-lr4+rhtft"] == (yes.variant, no.variant)
    files = lora_inputs(cfg, "R")
    assert "R/eval/smollm2-caldera-r16-lr4+rhtft/ppl_wiki.json" in files
    assert "R/lora/smollm2-caldera-r16-lr4+rhtft-ft8/rte.json" in files
    # without the rht_ft block the RHT-FT rows cannot be measured: selecting one is refused, by name
    del cfg["rht_ft"]
    with pytest.raises(ValueError, match="rht_ft: true"):
        lora_rows(cfg)


def _write_eval(res: Path, variant: str, nll: list[float], correct: list[int]) -> None:
    import json

    d = res / "eval" / variant
    d.mkdir(parents=True)
    (d / "ppl_wiki.json").write_text(json.dumps({"ppl": 10.0, "ppl_lo": 9.0, "ppl_hi": 11.0, "window_nll": nll,
                                                 "window_tokens": [512] * len(nll)}))
    docs = [{"doc_id": i, "acc": c} for i, c in enumerate(correct)]
    tasks = {"caldera_rte": {"docs": docs}, "caldera_winogrande": {"docs": docs}}
    (d / "zeroshot.json").write_text(json.dumps({"results": {"tasks": tasks}}))


def test_every_measured_row_has_its_no_ft_baseline(tmp_path):
    """The "no FT" column comes from rule `evaluate`'s files of each row's starting model: the LoftQ row's own
    (not only CALDERA's), and the RHT-FT row's +rhtft model (never the plain compressed one)."""
    from caldera.experiments.report.table5 import lora_inputs

    cfg = _mini()
    cfg["lora_ft"]["rows"].append(_rht_cfg()["lora_ft"]["rows"][0])
    for vid, acc in (("smollm2-loftq2-r8-lr16", [0, 0, 1]), ("smollm2-caldera-r16-lr4", [1, 0, 0]),
                     ("smollm2-caldera-r16-lr4+rhtft", [1, 1, 0])):
        _write_eval(tmp_path, vid, [3.0, 4.0], acc)
    files = lora_inputs(cfg, "R")
    for vid in ("smollm2-loftq2-r8-lr16", "smollm2-caldera-r16-lr4", "smollm2-caldera-r16-lr4+rhtft"):
        assert f"R/eval/{vid}/zeroshot.json" in files and f"R/eval/{vid}/ppl_wiki.json" in files
    tab = build_table5(tmp_path, Table5Plan.from_config(cfg))
    by = {r["row"]: r for r in tab["rows"] if r.get("status", "").startswith("measured")}
    assert by["smollm2-loftq2-r8-lr16-ft8"]["rte_no_ft"]["correct"] == [0, 0, 1]
    assert by["smollm2-caldera-r16-lr4-ft8"]["winogrande_no_ft"]["correct"] == [1, 0, 0]
    assert by["smollm2-caldera-r16-lr4+rhtft-ft8"]["rte_no_ft"]["correct"] == [1, 1, 0]
    assert by["smollm2-loftq2-r8-lr16-ft8"]["wiki_no_ft"]["window_nll"] == [3.0, 4.0]
