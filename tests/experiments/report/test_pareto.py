"""The perplexity-vs-bits figure draws every method of every table on its stand-in (extra methods included), one
point per variant, with both bit counts and the interval, and the paper's own points apart."""

import json
from pathlib import Path

import pytest

from caldera.experiments.report import pareto as P

ROOT = Path(__file__).resolve().parents[3]
S = "SmolLM2-135M (test)"


def row(method, variant, b_lr, bits, ppl, ci=None, paper_model="llama-2-7b", paper=(2.2, 6.8), rank=16, storage=None):
    storage = storage or (None if bits is None else bits + 0.003)
    return {"method": method, "variant": variant, "b_lr": b_lr, "paper_model": paper_model, "paper_rank": rank,
            "stand_in": S, "ours": {"avg_bits": bits, "storage_bits": storage, "wiki2_ppl": ppl},
            "ours_ci": {"wiki2_ppl": ci or [ppl * 0.9, ppl * 1.1]},
            "paper": {"avg_bits": paper[0], "wiki2_ppl": paper[1]}}


T1 = {"table": "table1_llama2_zeroshot", "columns": ["avg_bits", "storage_bits", "wiki2_ppl"], "rows": [
    row("CALDERA (7B)", "smollm2-caldera-r16-lr4", 4, 2.18, 123.0, paper=(2.2, 6.76)),
    row("CALDERA (13B)", "smollm2-caldera-r16-lr4", 4, 2.18, 123.0, paper_model="llama-2-13b", paper=(2.16, 5.72)),
    row("rank-per-layer (ours only)", "smollm2-rank-per-layer-r16-lr4", 4, 2.18, 132.0, paper_model="—",
        paper=(None, None)),
    row("QuIP# (7B, No FT)", "smollm2-quipsharp", "—", 2.0, 150.0, rank=0, paper=(2.0, 8.23)),
    row("CALDERA (7B)", "smollm2-caldera-r32-lr4", 4, 2.37, 114.0, rank=256, paper=(2.4, 6.19)),
    {**row("Unquantized (7B)", "smollm2-dense", "—", None, 27.3, rank=0, paper=(16.0, 5.12))},
]}
T7 = {"table": "table7_mistral", "columns": ["wiki2_ppl"], "rows": [
    row("CALDERA", "smollm2-caldera-r16-lr4", 4, 2.18, 123.0, paper_model="mistral-7b", paper=(2.19, 6.01)),
    row("rtn-2bit (ours only)", "smollm2-rtn-2bit", "—", 2.25, 900.0, paper_model="—", paper=(None, None)),
]}


def test_every_method_one_point_per_variant_extra_methods_included():
    d = P.pareto_points({"table1_llama2_zeroshot": T1, "table7_mistral": T7})[S]
    variants = [p["variant"] for p in d["ours"]]
    assert sorted(variants) == sorted({"smollm2-caldera-r16-lr4", "smollm2-rank-per-layer-r16-lr4",
                                       "smollm2-quipsharp", "smollm2-caldera-r32-lr4", "smollm2-rtn-2bit"})
    series = {p["variant"]: p["series"] for p in d["ours"]}
    assert series["smollm2-rank-per-layer-r16-lr4"] == "rank-per-layer, 4-bit LR"
    assert series["smollm2-rtn-2bit"] == "rtn-2bit" and series["smollm2-quipsharp"] == "QuIP#"
    assert series["smollm2-caldera-r16-lr4"] == "CALDERA, 4-bit LR"
    assert d["dense"]["ppl"] == 27.3 and d["dense"]["lo"] == pytest.approx(27.3 * 0.9)


def test_points_carry_both_bit_counts_and_the_interval():
    d = P.pareto_points({"t": T1})[S]
    p = next(p for p in d["ours"] if p["variant"] == "smollm2-quipsharp")
    assert (p["avg_bits"], p["storage_bits"], p["ppl"]) == (2.0, pytest.approx(2.003), 150.0)
    assert (p["lo"], p["hi"]) == (pytest.approx(135.0), pytest.approx(165.0))


def test_paper_points_per_paper_model_and_the_envelope():
    d = P.pareto_points({"table1_llama2_zeroshot": T1, "table7_mistral": T7})[S]
    assert {(p["paper_model"], p["ppl"]) for p in d["paper"]} >= {("llama-2-7b", 6.76), ("llama-2-13b", 5.72),
                                                                ("mistral-7b", 6.01)}
    assert all(p["paper_model"] != "—" for p in d["paper"])  # an extra method has no paper point
    assert d["paper_dense"] == {"llama-2-7b": 5.12}
    front = {p["variant"] for p in d["ours"] if p["front"]}
    assert front == {"smollm2-quipsharp", "smollm2-caldera-r16-lr4", "smollm2-caldera-r32-lr4"}


def test_rht_fine_tuned_rows_are_their_own_series():
    t3 = {"table": "table3_llama2_rhtft", "rows": [row("CALDERA", "smollm2-caldera-r8-lr4+rhtft", 4, 2.09, 110.0)]}
    d = P.pareto_points({"table3_llama2_rhtft": t3})[S]
    assert d["ours"][0]["series"] == "CALDERA, 4-bit LR + RHT FT"


def test_figure_written_and_byte_stable(tmp_path):
    pytest.importorskip("matplotlib")
    paths = []
    for name, t in (("table1_llama2_zeroshot", T1), ("table7_mistral", T7)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(t))
    P.write_pareto([str(p) for p in paths], str(tmp_path / "a.png"), str(tmp_path / "a.pdf"), corpus="wiki-squad")
    P.write_pareto([str(p) for p in paths], str(tmp_path / "b.png"), str(tmp_path / "b.pdf"), corpus="wiki-squad")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    assert (tmp_path / "a.pdf").read_bytes() == (tmp_path / "b.pdf").read_bytes()


def test_title_names_the_corpus(monkeypatch):
    pytest.importorskip("matplotlib")
    from caldera.experiments.report import plots

    got = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, png, pdf: got.append(fig._suptitle.get_text()))
    P.plot_pareto({"t": T1}, "x.png", "x.pdf", corpus="wiki-squad")
    assert "Wikipedia paragraphs (wiki-squad), standing in for WikiText-2" in got[0]


def test_an_unreadable_table_names_the_file_and_the_rule(tmp_path):
    bad = tmp_path / "table1_llama2_zeroshot.json"
    bad.write_text("{")
    with pytest.raises(ValueError, match=r"table1_llama2_zeroshot.json: cannot read the table .* `make_table`"):
        P.write_pareto([str(bad)], str(tmp_path / "a.png"), str(tmp_path / "a.pdf"))


def test_committed_tables_give_every_stand_in_its_points():
    tables = {p.stem: json.loads(p.read_text()) for p in (ROOT / "paper_tables/generated").glob("table[1-47]_*.json")}
    d = P.pareto_points(tables)
    assert len(d) == 2  # SmolLM2 and Gemma-3
    for s in d.values():
        assert s["ours"] and s["paper"] and s["dense"] is not None
