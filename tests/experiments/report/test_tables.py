"""Table assembly helpers (the full tables are built by the smoke workflow test)."""

import pytest

from caldera.experiments.report.tables import bits_label


def test_bits_label_prints_like_the_paper():
    assert [bits_label(b) for b in (4.0, 16.0, "4.0", 4, 3.5, None, "", "—")] == [4, 16, 4, 4, 3.5, "—", "—", "—"]


def test_tables_print_intervals_and_carry_the_samples(tmp_path):
    import csv
    import json
    import math
    from pathlib import Path

    import yaml

    from caldera import stats
    from caldera.experiments.planning.plan import table_rows
    from caldera.experiments.report.tables import TablePlan, write_table

    config = yaml.safe_load(Path("config/mini.yaml").read_text())
    quip = next(r["variant"] for r in table_rows(config, "table7_mistral") if r["variant"] is not None
                 and r["variant"].method == "quip#")
    d = tmp_path / "eval" / quip.id
    d.mkdir(parents=True)
    nll = [511 * x for x in (4.0, 5.0, 4.5, 5.5)]
    for corpus in ("wiki", "c4"):
        ci = stats.perplexity_interval(nll, [511] * 4)
        (d / f"ppl_{corpus}.json").write_text(json.dumps({"ppl": math.exp(4.75), "window_nll": nll,
                                                          "window_tokens": [511] * 4, "ppl_lo": ci["lo"],
                                                          "ppl_hi": ci["hi"]}))
    docs = [{"doc_id": i, "acc": float(i < 3), "acc_norm": float(i < 2), "margin": 0.1 * i} for i in range(10)]
    tasks = {t: {"acc": 0.3, "acc_norm": 0.2, "n": 10, "docs": docs} for t in
             ("caldera_winogrande", "caldera_rte", "caldera_piqa", "caldera_arc_easy", "caldera_arc_challenge")}
    (d / "zeroshot.json").write_text(json.dumps({"results": {"tasks": tasks}}))
    out = {k: str(tmp_path / f"t.{k}") for k in ("md", "tex", "csv", "json")}
    tab = write_table(str(tmp_path), TablePlan.from_config(config, "table7_mistral"), out["md"], out["tex"], out["csv"],
                      out["json"])
    row = next(r for r in tab["rows"] if r["variant"] == quip.id)
    lo, hi = stats.wilson_interval(3, 10)
    assert row["ours_ci"]["wino_acc"] == [100 * lo, 100 * hi]
    lo_n, hi_n = stats.wilson_interval(2, 10)  # Table 7 prints acc_norm for PIQA / ARC
    assert row["ours"]["piqa_acc"] == 20.0 and row["ours_ci"]["piqa_acc"] == [100 * lo_n, 100 * hi_n]
    assert row["ours_ci"]["wiki2_ppl"] == [ci["lo"], ci["hi"]]
    md = Path(out["md"]).read_text()
    assert f"{math.exp(4.75):.2f} [{ci['lo']:.2f}, {ci['hi']:.2f}]" in md
    assert f"30.0 [{100 * lo:.1f}, {100 * hi:.1f}]" in md
    # the caption names the text for what it is (not WikiText-2 / C4)
    assert ("wiki: Wikipedia paragraphs (wiki-squad), standing in for WikiText-2 (8 × 512), c4: CoQA stories "
            "(coqa-stories), standing in for C4 (2 × 512)") in md
    rec = next(r for r in csv.DictReader(open(out["csv"])) if r["method"] == row["method"])
    assert float(rec["wiki2_ppl_ours_lo"]) == ci["lo"] and float(rec["wino_acc_ours_hi"]) == 100 * hi
    saved = json.loads(Path(out["json"]).read_text())
    assert saved["samples"][quip.id]["ppl"]["wiki"]["window_nll"] == nll
    assert saved["samples"][quip.id]["zeroshot"]["caldera_rte"]["margin"] == [d["margin"] for d in docs]
    assert saved["stats"]["seed"] == stats.SEED


def test_rhtft_table_shows_before_and_after_and_carries_both_samples(tmp_path):
    import json
    import math
    from pathlib import Path

    import yaml

    from caldera.experiments.planning.plan import table_rows
    from caldera.experiments.report.tables import TablePlan, write_table

    config = yaml.safe_load(Path("config/mini.yaml").read_text())
    row = next(r for r in table_rows(config, "table3_llama2_rhtft") if r["variant"] is not None)
    for v, nll in ((row["variant"], 4.0), (row["base"], 4.5)):
        d = tmp_path / "eval" / v.id
        d.mkdir(parents=True)
        for corpus in ("wiki", "c4"):
            (d / f"ppl_{corpus}.json").write_text(json.dumps({"ppl": math.exp(nll), "window_nll": [10 * nll] * 3,
                                                              "window_tokens": [10] * 3}))
    (tmp_path / "rhtft" / row["base"].id).mkdir(parents=True)
    (tmp_path / "rhtft" / row["base"].id / "rhtft.json").write_text(json.dumps({"best_epoch": 2, "wall_s": 9.0}))
    out = {k: str(tmp_path / f"t.{k}") for k in ("md", "tex", "csv", "json")}
    tab = write_table(str(tmp_path), TablePlan.from_config(config, "table3_llama2_rhtft"), out["md"], out["tex"],
                      out["csv"], out["json"])
    got = next(r for r in tab["rows"] if r["variant"] == row["variant"].id)
    assert got["base_variant"] == row["base"].id and got["rht_ft"]["best_epoch"] == 2
    assert got["ours"]["wiki2_ppl"] == math.exp(4.0) and got["ours"]["wiki2_ppl_no_ft"] == math.exp(4.5)
    assert got["paper"]["wiki2_ppl"] == 6.30 and got["paper"]["wiki2_ppl_no_ft"] == 7.37  # Table 3 / Table 1
    assert got["ours"]["avg_bits"] is not None  # App. E.5 formula, as for the un-fine-tuned row
    assert set(tab["samples"]) == {row["variant"].id, row["base"].id}
    pending = [r for r in tab["rows"] if r["variant"] is None]
    assert len(pending) == 5 and all(r["stand_in"].startswith("pending in mini") for r in pending)
    md = Path(out["md"]).read_text()
    assert "Rows run: CALDERA k=64 B_LR=4" in md
    assert "Stand-in model for every row: SmolLM2-135M (Q4_1-dequantized, fp32);" in md


def test_a_replicated_row_prints_the_geometric_mean_across_seeds_with_the_combined_interval(tmp_path):
    import json
    import math
    from pathlib import Path

    import numpy as np
    import yaml

    from caldera import stats
    from caldera.experiments.planning.plan import all_variants, replicate_variants
    from caldera.experiments.report.tables import TablePlan, write_table

    config = yaml.safe_load(Path("config/mini.yaml").read_text())
    reps = replicate_variants(config, all_variants(config))["smollm2-quipsharp"]
    seeds = config["replicates"]["seeds"]
    assert len(seeds) >= 2 and [r.id for r in reps] == ["smollm2-quipsharp"] + [f"smollm2-quipsharp-seed{s}"
                                                                                   for s in seeds]
    S = len(reps)
    tok = [511] * 4
    nlls = []
    for k, r in enumerate(reps):  # seed k: every window log(ppl) shifted by 0.1 k
        d = tmp_path / "eval" / r.id
        d.mkdir(parents=True)
        nll = [511 * (x + 0.1 * k) for x in (4.0, 5.0, 4.5, 5.5)]
        nlls.append(nll)
        for corpus in ("wiki", "c4"):
            (d / f"ppl_{corpus}.json").write_text(json.dumps({"ppl": math.exp(sum(nll) / 2044), "window_nll": nll,
                                                              "window_tokens": tok}))
        (d / "zeroshot.json").write_text(json.dumps({"results": {"tasks": {}}, "skipped": "replicate"}))
    out = {k: str(tmp_path / f"t.{k}") for k in ("md", "tex", "csv", "json")}
    tab = write_table(str(tmp_path), TablePlan.from_config(config, "table7_mistral"), out["md"], out["tex"], out["csv"],
                      out["json"])
    row = next(r for r in tab["rows"] if r["variant"] == "smollm2-quipsharp")
    assert row["seeds"] == {"ppl": S, "c4": S, "zeroshot": 1}
    geo = math.exp(np.mean([sum(n) / 2044 for n in nlls]))  # geometric mean of the S perplexities
    assert row["ours"]["wiki2_ppl"] == __import__("pytest").approx(geo)
    ci = stats.seeded_perplexity(nlls, tok)
    assert row["ours_ci"]["wiki2_ppl"] == [ci["lo"], ci["hi"]]
    one = stats.perplexity_interval(np.mean(nlls, axis=0), tok)  # windows alone: narrower than with the seeds
    assert ci["lo"] < one["lo"] and ci["hi"] > one["hi"]
    assert f"| {S} / 1 |" in Path(out["md"]).read_text()
    assert row["ours"]["wiki2_x_dense"] is None  # Table 7 has no unquantized row (the paper prints none)
    saved = json.loads(Path(out["json"]).read_text())
    assert saved["realizations"]["smollm2-quipsharp"]["seeds"] == list(range(S))
    assert len(saved["seed_samples"]["smollm2-quipsharp"]) == S
    # replicates scored on Wiki2 only (replicates.corpora): C4 is the variant's own realization, and says so
    for r in reps[1:]:
        (tmp_path / "eval" / r.id / "ppl_c4.json").write_text(json.dumps({"skipped": "replicates.corpora"}))
    tab = write_table(str(tmp_path), TablePlan.from_config(config, "table7_mistral"), out["md"], out["tex"], out["csv"],
                      out["json"])
    row = next(r for r in tab["rows"] if r["variant"] == "smollm2-quipsharp")
    assert row["seeds"] == {"ppl": S, "c4": 1, "zeroshot": 1}
    assert row["ours"]["c4_ppl"] == __import__("pytest").approx(math.exp(sum(nlls[0]) / 2044))
    assert f"| {S} (C4 1) / 1 |" in Path(out["md"]).read_text()


def test_times_dense_column_beside_the_papers_ratio():
    import math

    import pytest

    from caldera.experiments.report.tables import add_times_dense

    tok = [100] * 4
    dense_nll, comp_nll = [100 * x for x in (3.0, 3.2, 2.8, 3.0)], [100 * x for x in (4.0, 4.2, 3.8, 4.4)]
    rows = [{"method": "Unquantized (7B)", "paper_model": "llama-2-7b", "variant": "d",
             "paper": {"wiki2_ppl": 5.12}, "ours": {"wiki2_ppl": math.exp(3.0)}, "ours_ci": {}},
            {"method": "CALDERA (7B)", "paper_model": "llama-2-7b", "variant": "c",
             "paper": {"wiki2_ppl": 7.36}, "ours": {"wiki2_ppl": math.exp(4.1)}, "ours_ci": {}}]
    tab = {"columns": ["avg_bits", "wiki2_ppl", "c4_ppl"], "rows": rows,
           "samples": {"d": {"ppl": {"wiki": {"window_nll": dense_nll, "window_tokens": tok}}},
                       "c": {"ppl": {"wiki": {"window_nll": comp_nll, "window_tokens": tok}}}},
           "realizations": {"d": {"random": False, "seeds": [None], "ids": ["d"]},
                            "c": {"random": True, "seeds": [0], "ids": ["c"]}}}
    add_times_dense(tab)
    assert tab["columns"] == ["avg_bits", "wiki2_ppl", "wiki2_x_dense", "c4_ppl"]
    c = rows[1]
    assert c["paper"]["wiki2_x_dense"] == pytest.approx(7.36 / 5.12)  # the paper loses ×1.44
    assert c["ours"]["wiki2_x_dense"] == pytest.approx(math.exp(1.1))
    lo, hi = c["ours_ci"]["wiki2_x_dense"]  # one seed: the windows' interval, finite
    assert lo < math.exp(1.1) < hi < 10
    assert rows[0]["ours"]["wiki2_x_dense"] is None


def test_every_method_shows_its_bits_formula_and_storage(tmp_path):
    """An extra method's average bits come from its compression summary (the formula over the model's shapes, as
    compress wrote it) and every compressed row shows its true storage bits; an RHT fine-tuned row pays 31 more
    bits per sign (float32 signs instead of packed ones). Regression: extra methods printed "— / —" (the table
    read a key nothing writes)."""
    import csv
    import json
    from pathlib import Path

    import pytest
    import yaml

    from caldera.experiments.planning.plan import table_rows
    from caldera.experiments.report.tables import TablePlan, variant_bits, write_table

    config = yaml.safe_load(Path("config/mini.yaml").read_text())
    config["extra_methods"] = [{"name": "rtn-3bit", "method": "rtn", "params": {"bits": 3}}]
    rows = table_rows(config, "table7_mistral")
    rtn = next(r["variant"] for r in rows if r.get("label") == "rtn-3bit")
    quip = next(r["variant"] for r in rows if r["variant"] is not None and r["variant"].method == "quip#")
    for v, bits in ((rtn, {"average_bits": 3.0, "storage_bits_per_weight": 3.0125}),
                    (quip, {"average_bits": 2.0, "storage_bits_per_weight": 2.0024})):
        (tmp_path / "compressed" / v.id).mkdir(parents=True)
        (tmp_path / "compressed" / v.id / "summary.json").write_text(json.dumps({"bits": bits}))
    out = {k: str(tmp_path / f"t.{k}") for k in ("md", "tex", "csv", "json")}
    tab = write_table(str(tmp_path), TablePlan.from_config(config, "table7_mistral"), out["md"], out["tex"], out["csv"],
                      out["json"])
    assert tab["columns"][:2] == ["avg_bits", "storage_bits"]
    got = {r["variant"]: r for r in tab["rows"] if r["variant"]}
    assert got[rtn.id]["ours"]["avg_bits"] == 3.0 and got[rtn.id]["ours"]["storage_bits"] == 3.0125
    assert got[quip.id]["ours"]["avg_bits"] == 2.0 and got[quip.id]["ours"]["storage_bits"] == 2.0024
    assert got[quip.id]["paper"]["storage_bits"] is None  # the paper prints no storage bits
    md = Path(out["md"]).read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("| rtn-3bit (ours only)"))
    assert "| — / 3.00 | — / 3.01 |" in line
    rec = next(r for r in csv.DictReader(open(out["csv"])) if r["method"] == "rtn-3bit (ours only)")
    assert float(rec["avg_bits_ours"]) == 3.0 and float(rec["storage_bits_ours"]) == 3.0125

    # a fine-tuned variant: its base's storage plus 31 bits per sign parameter (float32 signs)
    ft = next(r for r in table_rows(config, "table3_llama2_rhtft") if r["variant"] is not None)
    base = ft["base"]
    (tmp_path / "compressed" / base.id).mkdir(parents=True)
    (tmp_path / "compressed" / base.id / "summary.json").write_text(
        json.dumps({"bits": {"storage_bits_per_weight": 2.5, "compressed_params": 1000}}))
    assert variant_bits(tmp_path, ft["variant"]) == {"compressed_params": 1000}  # no rhtft.json: unknown, not 2.5
    (tmp_path / "rhtft" / base.id).mkdir(parents=True)
    (tmp_path / "rhtft" / base.id / "rhtft.json").write_text(json.dumps({"n_sign_params": 20}))
    assert variant_bits(tmp_path, ft["variant"])["storage_bits_per_weight"] == pytest.approx(2.5 + 31 * 20 / 1000)
    assert variant_bits(tmp_path, base)["storage_bits_per_weight"] == 2.5


def test_an_extra_methods_rank_and_bits_come_from_what_its_compression_stored(tmp_path):
    """An extra method's row prints the rank and B_LR its checkpoint stores (not the Variant's defaults, "— → 0"
    and "—"), "per matrix" where the ranks differ, and says when its Q is stored as floats."""
    import json
    from pathlib import Path

    import yaml

    from caldera.experiments.planning.plan import table_rows
    from caldera.experiments.report.tables import TablePlan, build_table

    config = yaml.safe_load(Path("config/mini.yaml").read_text())
    config["extra_methods"] = [{"name": "group", "method": "rtn", "params": {"bits": 3}},
                               {"name": "float-q", "method": "rtn", "params": {"bits": 4}},
                               {"name": "mixed", "method": "rtn", "params": {"bits": 2}}]
    rows = {r.get("label"): r["variant"] for r in table_rows(config, "table7_mistral") if r.get("label")}
    summaries = {"group": {"average_bits": 3.2, "storage_bits_per_weight": 3.7, "b_q": 3.0, "b_lr": 16.0, "rank": 8,
                           "n_matrices_compressed": 210, "dense_q_matrices": 0},
                 "float-q": {"average_bits": 32.0, "storage_bits_per_weight": 32.0, "b_q": 32.0, "b_lr": None,
                             "rank": 0, "n_matrices_compressed": 210, "dense_q_matrices": 210},
                 "mixed": {"average_bits": 2.3, "storage_bits_per_weight": 2.4, "n_matrices_compressed": 210,
                           "dense_q_matrices": 0}}
    for label, bits in summaries.items():
        (tmp_path / "compressed" / rows[label].id).mkdir(parents=True)
        (tmp_path / "compressed" / rows[label].id / "summary.json").write_text(json.dumps({"bits": bits}))
    tab = build_table(str(tmp_path), TablePlan.from_config(config, "table7_mistral"))
    got = {r["variant"]: r for r in tab["rows"] if r["variant"]}
    g, f, m = (got[rows[k].id] for k in ("group", "float-q", "mixed"))
    assert (g["method"], g["rank"], g["b_lr"], g.get("q_dense")) == ("group (ours only)", 8, 16, None)
    assert (f["method"], f["rank"], f["b_lr"], f["q_dense"]) == ("float-q, Q stored dense (ours only)", 0, "—", True)
    assert (m["rank"], m["b_lr"]) == ("per matrix", "—")


def test_distribution_columns_average_the_seeds_and_give_top1_in_percent():
    from caldera.experiments.report.tables import distribution_cells

    tok = [10, 10, 10]
    seeds = [{"ppl": {"wiki": {"window_tokens": tok, "window_kl": [1.0, 2.0, 3.0], "window_dlogp": [-1.0] * 3,
                               "window_top1": [5.0, 6.0, 7.0]}}},
             {"ppl": {"wiki": {"window_tokens": tok, "window_kl": [3.0, 2.0, 1.0], "window_dlogp": [-3.0] * 3,
                               "window_top1": [7.0, 8.0, 9.0]}}}]
    one = distribution_cells(seeds[:1], random=True)
    assert one["wiki2_kl"] == pytest.approx(0.2) and one["wiki2_top1"] == pytest.approx(60.0)
    two = distribution_cells(seeds, random=True)
    assert two["wiki2_kl"] == pytest.approx(0.2) and two["wiki2_dlogp"] == pytest.approx(-0.2)
    assert two["wiki2_top1"] == pytest.approx(70.0)
    lo, hi = two["wiki2_dlogp_ci"]
    assert lo < -0.2 < hi  # the two seeds disagree (−0.1 vs −0.3): the seed part widens the interval
    assert distribution_cells([{"ppl": {"wiki": {"window_tokens": tok, "window_nll": [1.0] * 3}}}], True) == {}


def test_rows_with_q_at_3_bits_count_3_bits_in_the_formula(tmp_path):
    """The App. E.5 formula takes each row's own Q bits (config/mini-regime.yaml sets ``q_bits: 3``): QuIP# is 3.00
    bits there and every CALDERA row one bit above its 2-bit self (a formula that assumed 2-bit Q fails here)."""
    import json
    from pathlib import Path

    import pytest
    import yaml

    from caldera.bits import CONFIG_SHAPES, average_bits
    from caldera.experiments.planning.plan import table_rows
    from caldera.experiments.report.tables import TablePlan, write_table

    config = yaml.safe_load(Path("config/mini-regime.yaml").read_text())
    rows = [r for r in table_rows(config, "table7_mistral") if r["variant"] is not None]
    for r in rows:
        (tmp_path / "compressed" / r["variant"].id).mkdir(parents=True, exist_ok=True)
        (tmp_path / "compressed" / r["variant"].id / "summary.json").write_text(json.dumps({"bits": {}}))
    out = {k: str(tmp_path / f"t.{k}") for k in ("md", "tex", "csv", "json")}
    tab = write_table(str(tmp_path), TablePlan.from_config(config, "table7_mistral"), out["md"], out["tex"], out["csv"],
                      out["json"])
    shapes = CONFIG_SHAPES[config["models"]["smollm2"]["shapes"]]
    got = {r["variant"]: r["ours"]["avg_bits"] for r in tab["rows"] if r["variant"]}
    quip = next(r["variant"] for r in rows if r["variant"].method == "quip#")
    assert got[quip.id] == pytest.approx(3.0)
    cal = [r["variant"] for r in rows if r["variant"].method == "caldera"]
    assert cal
    for v in cal:
        assert got[v.id] == pytest.approx(average_bits(shapes, 2, v.b_lr, v.rank) + 1.0)
