"""Table 5's rows from a config: mapping, formula bits, statuses (no model needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from caldera.bits import MODEL_SHAPES, average_bits
from caldera.finetune.experiment import build_table5, lora_rows

ROOT = Path(__file__).resolve().parents[2]


def _mini():
    return yaml.safe_load((ROOT / "config/mini.yaml").read_text())


def test_mini_rows_and_bits():
    rows = {r.id: r for r in lora_rows(_mini())}
    assert set(rows) == {"smollm2-caldera-r16-lr4-ft8", "smollm2-loftq2-r8-lr16-ft8"}
    c = rows["smollm2-caldera-r16-lr4-ft8"]
    assert c.variant.id == "smollm2-caldera-r16-lr4"  # the Table 1 checkpoint, reused
    sh = MODEL_SHAPES["smollm2-135m"]
    assert c.avg_bits == pytest.approx(average_bits(sh, 2, 4, 16, ft_rank=8))
    q = rows["smollm2-loftq2-r8-lr16-ft8"]
    assert q.variant.method == "loftq" and q.variant.config.bits == 2 and q.ft_rank == q.variant.rank == 8


def test_unknown_row_is_refused():
    cfg = _mini()
    cfg["lora_ft"]["rows"] = [{"model": "llama-2-7b", "method": "CALDERA", "rank": 96, "b_lr": 4}]
    with pytest.raises(ValueError, match="matches no measurable row"):
        lora_rows(cfg)


def test_table_statuses_without_results(tmp_path):
    tab = build_table5(tmp_path, _mini())
    st = [r["status"] for r in tab["rows"]]
    assert st.count("measured") == 1 and sum(s.startswith("measured with this project") for s in st) == 1
    assert any(s.startswith("pending in mini") for s in st)
    assert sum(s == "needs RHT-FT (Tables 3–4)" for s in st) == 8
    lq = [r for r in tab["rows"] if r["paper"]["method"] == "LQ-LoRA"]
    assert lq and all(r["status"].startswith("reference") for r in lq)
    measured = next(r for r in tab["rows"] if r["status"] == "measured")
    assert measured["wiki"] is None  # no result file: nothing invented
