"""Transcription checks for the paper's tables shipped in ``caldera/data/paper_reference``.

Spot values below were read off the paper's LaTeX source by hand. When the environment variable
``CALDERA_PAPER_TEX`` points at the paper's ``.tex`` file, :func:`test_every_cell_matches_latex` also
re-parses every table there and compares every cell; it is skipped otherwise (the package itself never
reads the paper).
"""

from __future__ import annotations

import csv
import glob
import json
import os
import re
from pathlib import Path

import pytest

from caldera.paper_reference import list_reference_tables, load_reference_table, reference_table_meta

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "caldera" / "data" / "paper_reference"

ZS = ["model", "method", "method_printed", "rank", "b_q", "b_lr", "rht_ft", "avg_bits", "wiki2_ppl",
      "c4_ppl", "wino_acc", "rte_acc", "piqa_acc", "arce_acc", "arcc_acc", "note"]

# name -> (paper label, number of rows, header)
EXPECTED = {
    "table1_llama2_zeroshot": ("tab:llama-2-zeroshot", 16, ZS),
    "table2_llama3_zeroshot": ("tab:llama-3-zeroshot", 7, ZS),
    "table3_llama2_rhtft": ("tab:llama-2-zeroshot-RHT-FT", 6, ZS),
    "table4_llama3_rhtft": ("tab:llama-3-zeroshot-RHT-FT", 6, ZS),
    "table5_finetune": ("tab:llama-finetune", 22,
                        ["model", "method", "method_printed", "rank", "b_q", "b_lr", "ft_rank", "rht_ft",
                         "avg_bits", "wiki2_ppl", "rte_acc", "wino_acc", "note"]),
    "table6_throughput": ("tab:llama-2-throughput", 10,
                          ["model", "method", "method_printed", "rank", "b_q", "b_lr", "avg_bits",
                           "tok_per_s", "note"]),
    "table7_mistral": ("tab:mistral-7b", 3,
                       ["model", "method", "method_printed", "rank", "b_q", "b_lr", "rht_ft", "avg_bits",
                        "wiki2_ppl", "c4_ppl", "wino_acc", "piqa_acc", "arce_acc", "arcc_acc", "note"]),
    "table_ft_hyperparams": ("tab:llama-finetune-parameters", 3,
                             ["dataset", "block_size", "batch_size_per_device", "grad_acc_steps", "epochs",
                              "lr", "weight_decay", "lr_sched", "warmup_steps", "steps", "num_gpus"]),
}

# (table, row index, column) -> cell exactly as printed in the paper
SPOT = {
    ("table1_llama2_zeroshot", 0, "wiki2_ppl"): "7.36",
    ("table1_llama2_zeroshot", 3, "arce_acc"): "63.6",
    ("table1_llama2_zeroshot", 4, "c4_ppl"): "10.0",
    ("table1_llama2_zeroshot", 6, "avg_bits"): "2.08",
    ("table1_llama2_zeroshot", 8, "arcc_acc"): "40.4",
    ("table1_llama2_zeroshot", 11, "wino_acc"): "77.6",
    ("table1_llama2_zeroshot", 12, "arcc_acc"): "48.6",
    ("table1_llama2_zeroshot", 14, "wiki2_ppl"): "4.57",
    ("table1_llama2_zeroshot", 15, "piqa_acc"): "81.1",
    ("table2_llama3_zeroshot", 1, "wiki2_ppl"): "10.6",
    ("table2_llama3_zeroshot", 2, "rte_acc"): "69.7",
    ("table2_llama3_zeroshot", 5, "c4_ppl"): "15.6",
    ("table2_llama3_zeroshot", 6, "arce_acc"): "80.1",
    ("table3_llama2_rhtft", 1, "wiki2_ppl"): "6.30",
    ("table3_llama2_rhtft", 3, "c4_ppl"): "7.75",
    ("table3_llama2_rhtft", 5, "rte_acc"): "53.4",
    ("table4_llama3_rhtft", 0, "c4_ppl"): "8.9",
    ("table4_llama3_rhtft", 3, "arcc_acc"): "42.3",
    ("table4_llama3_rhtft", 4, "rte_acc"): "58.1",
    ("table5_finetune", 0, "rte_acc"): "82.31",
    ("table5_finetune", 7, "rte_acc"): "87.00",
    ("table5_finetune", 9, "wino_acc"): "88.63",
    ("table5_finetune", 12, "wino_acc"): "85.4",
    ("table5_finetune", 15, "wino_acc"): "89.19",
    ("table5_finetune", 18, "wiki2_ppl"): "5.78",
    ("table5_finetune", 20, "wino_acc"): "72.4",
    ("table5_finetune", 20, "b_q"): "2.75",
    ("table6_throughput", 0, "tok_per_s"): "31.75",
    ("table6_throughput", 1, "tok_per_s"): "61.68",
    ("table6_throughput", 5, "tok_per_s"): "87.74",
    ("table6_throughput", 8, "tok_per_s"): "4.66",
    ("table6_throughput", 9, "tok_per_s"): "18.18",
    ("table7_mistral", 0, "wino_acc"): "71.51",
    ("table7_mistral", 1, "avg_bits"): "2.38",
    ("table7_mistral", 2, "wino_acc"): "69.30",
    ("table7_mistral", 2, "arce_acc"): "72.90",
    ("table_ft_hyperparams", 0, "lr"): "3e-6",
    ("table_ft_hyperparams", 1, "steps"): "160",
    ("table_ft_hyperparams", 2, "warmup_steps"): "100",
}


def _csv_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def test_all_tables_listed():
    assert sorted(list_reference_tables()) == sorted(EXPECTED)
    on_disk = sorted(p.stem for p in DATA.glob("*.csv"))
    assert on_disk == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_row_and_column_counts(name):
    label, nrows, header = EXPECTED[name]
    got_header, rows = _csv_rows(DATA / f"{name}.csv")
    assert got_header == header
    assert len(rows) == nrows
    assert all(len(r) == len(header) for r in rows)
    assert len(load_reference_table(name)) == nrows
    assert reference_table_meta(name)["label"] == label
    assert load_reference_table(label) == load_reference_table(name)


@pytest.mark.parametrize("key", sorted(SPOT), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}")
def test_spot_values(key):
    name, i, col = key
    raw = load_reference_table(name, raw=True)
    assert raw[i][col] == SPOT[key]
    parsed = load_reference_table(name)[i][col]
    assert float(parsed) == float(SPOT[key])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_typed_parsing(name):
    meta = reference_table_meta(name)
    raw = load_reference_table(name, raw=True)
    parsed = load_reference_table(name)
    pytypes = {"str": str, "int": int, "float": float, "bool": bool}
    for r, p in zip(raw, parsed):
        for col, kind in meta["columns"].items():
            if r[col] == "":
                assert p[col] is None
            else:
                assert type(p[col]) is pytypes[kind], (col, r[col])


def test_package_data_glob_covers_files():
    """pyproject's ``caldera = ["data/**/*"]`` must ship every data file."""
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"data/**/*"' in pyproject
    shipped = {Path(p) for p in glob.glob(str(REPO / "caldera" / "data" / "**" / "*"), recursive=True)}
    for p in DATA.iterdir():
        assert p in shipped


def test_tables_json_metadata():
    doc = json.loads((DATA / "tables.json").read_text())
    tables = doc["tables"]
    assert sorted(tables) == sorted(EXPECTED)
    for name, meta in tables.items():
        assert meta["label"] == EXPECTED[name][0]
        assert list(meta["columns"]) == EXPECTED[name][2]
        assert meta["caption_summary"]
        for col, unit in meta["units"].items():
            assert col in meta["columns"]
            if col.endswith("_ppl"):
                assert unit.startswith("perplexity")
            if col.endswith("_acc"):
                assert "percent" in unit
    assert tables["table7_mistral"]["accuracy_metric"] == {
        "wino_acc": "acc", "piqa_acc": "acc_norm", "arce_acc": "acc_norm", "arcc_acc": "acc_norm"}
    for name in ["table1_llama2_zeroshot", "table2_llama3_zeroshot", "table3_llama2_rhtft",
                 "table4_llama3_rhtft"]:
        acc = tables[name]["accuracy_metric"]
        assert set(acc) == {"wino_acc", "rte_acc", "piqa_acc", "arce_acc", "arcc_acc"}
        assert set(acc.values()) == {"unspecified (paper); we report acc and acc_norm"}


def test_oom_and_dashes():
    rows = load_reference_table("table6_throughput")
    oom = [r for r in rows if r["tok_per_s"] is None]
    assert len(oom) == 1 and oom[0]["model"] == "llama-2-70b" and "OOM" in oom[0]["note"]
    t5 = load_reference_table("table5_finetune")
    llama3_baselines = [r for r in t5 if r["model"] == "llama-3-8b" and r["method"] != "CALDERA"]
    assert len(llama3_baselines) == 3
    assert all(r["wiki2_ppl"] is None and r["rte_acc"] is None and r["wino_acc"] is None
               for r in llama3_baselines)
    assert all(r["ft_rank"] == 64 for r in t5 if r["method"] == "CALDERA")


def test_unknown_table_raises():
    with pytest.raises(ValueError, match="unknown reference table"):
        load_reference_table("table99")


# ------------------------------------------------------------------------ optional full LaTeX check


def _latex_rows(tex: str, label: str) -> list[list[str]]:
    start = tex.index(f"\\label{{{label}}}")
    body = tex[tex.index("\\begin{tabular}", start):tex.index("\\end{tabular}", start)]
    body = body.split("\n", 1)[1]  # drop the column spec line
    out = []
    for chunk in body.split("\\\\"):
        for tok in ["\\rowcolor{gray!25}", "\\midrule", "\\toprule", "\\bottomrule"]:
            chunk = chunk.replace(tok, "")
        chunk = chunk.strip()
        if not chunk or "Method" in chunk or "Dataset" in chunk or "multicolumn" in chunk \
                or "texttt" in chunk:
            continue
        cells = [re.sub(r"\\textbf\{([^}]*)\}", r"\1", c).strip() for c in chunk.split("&")]
        out.append(cells)
    return out


def _blank(v: str) -> str:
    return "" if v in {"---", "--", "OOM"} else v


def _expected_from_latex(name: str, cells: list[list[str]]) -> list[list[str]]:
    """Project each LaTeX row onto the CSV's numeric columns, in CSV row order."""
    if name.startswith(("table1", "table2", "table3", "table4")):
        return [[_blank(c) for c in r[1:4] + r[4:11]] for r in cells]
    if name == "table5_finetune":
        out = []
        for r in cells:
            r = [_blank(c) for c in r]
            out.append([r[1], r[2], r[3], r[4], r[5], *r[6:9]])
            out.append([r[1], r[2], r[3], r[4], r[5], *r[9:12]])
        return out
    if name == "table6_throughput":
        return [[_blank(c) for c in r[1:4]] for r in cells]
    if name == "table7_mistral":
        return [[_blank(c) for c in r[2:10]] for r in cells]
    if name == "table_ft_hyperparams":
        return [[re.sub(r" steps?$", "", c) for c in r] for r in cells]
    raise AssertionError(name)


_CSV_PROJECTION = {
    "table5_finetune": ["rank", "b_q", "b_lr", "rht_ft", "avg_bits", "wiki2_ppl", "rte_acc", "wino_acc"],
    "table6_throughput": ["rank", "b_lr", "tok_per_s"],
    "table7_mistral": ["rank", "avg_bits", "wiki2_ppl", "c4_ppl", "wino_acc", "piqa_acc", "arce_acc",
                       "arcc_acc"],
    "table_ft_hyperparams": EXPECTED["table_ft_hyperparams"][2][:-1],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_cell_matches_latex(name):
    tex_path = os.environ.get("CALDERA_PAPER_TEX")
    if not tex_path or not Path(tex_path).is_file():
        pytest.skip("set CALDERA_PAPER_TEX to the paper's .tex file to cross-check every cell")
    tex = Path(tex_path).read_text(encoding="utf-8")
    expected = _expected_from_latex(name, _latex_rows(tex, EXPECTED[name][0]))
    cols = _CSV_PROJECTION.get(name, ["rank", "b_lr", "avg_bits"] + ZS[8:15])
    got = [[r[c] for c in cols] for r in load_reference_table(name, raw=True)]
    assert got == expected
