"""caldera.experiments.report.rerun: the targets of a partial (fresh-seed) run."""

from __future__ import annotations

from pathlib import Path

import pytest

from caldera.experiments.report.rerun import eval_targets, main

ROOT = Path(__file__).resolve().parents[3]


def _mini(overlay: dict | None = None) -> dict:
    from snakemake.utils import update_config, validate

    from caldera.strict_yaml import load_yaml_strict

    cfg = load_yaml_strict(ROOT / "config/mini.yaml")
    update_config(cfg, overlay or {})
    validate(cfg, str(ROOT / "workflow/schemas/config.schema.yaml"))
    return cfg


def test_targets_are_the_tables_row_variants_and_their_replicates():
    got = eval_targets(_mini({"replicates": {"variants": ["gemma3-caldera-r24-lr4"], "seeds": [1, 2]}}), "R",
                       ("table2_llama3_zeroshot",))
    ids = [t.removeprefix("R/eval/").removesuffix("/ppl_wiki.json") for t in got]
    assert ids == sorted(ids) and all(t.startswith("R/eval/") for t in got)
    assert all(i.startswith("gemma3-") for i in ids), ids  # Table 2's stand-in only
    assert "gemma3-dense" in ids and "gemma3-quipsharp" in ids
    # the replicated rows with every seed of replicates.variants, the others once
    assert {"gemma3-caldera-r24-lr4", "gemma3-caldera-r24-lr4-seed1", "gemma3-caldera-r24-lr4-seed2"} <= set(ids)
    assert not any(i.startswith("gemma3-caldera-r8-lr4-seed") for i in ids)
    assert not any(i.endswith("+rhtft") for i in ids)  # Table 4 is not asked for


def test_targets_follow_the_overlay_and_the_command_line(capsys):
    more = eval_targets(_mini({"replicates": {"variants": ["gemma3-caldera-r8-lr4"], "seeds": [1]}}), "R",
                        ("table2_llama3_zeroshot",))
    assert "R/eval/gemma3-caldera-r8-lr4-seed1/ppl_wiki.json" in more
    assert main(["config/mini.yaml", "results/x", "-", "--tables", "table2_llama3_zeroshot", "--targets"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == eval_targets(_mini(), "results/x", ("table2_llama3_zeroshot",))


@pytest.mark.parametrize("table", ["table1_llama2_zeroshot", "table7_mistral"])
def test_smollm2_tables_name_smollm2_variants(table):
    ids = [t.split("/")[2] for t in eval_targets(_mini(), "R", (table,))]
    assert ids and all(i.startswith("smollm2-") for i in ids)


def test_from_tables_decides_a_finished_runs_committed_tables_with_the_current_statistics(tmp_path):
    """The committed default run's table JSONs hold every sample the table claims read: --from-tables gives the
    same claims as deciding those tables directly, and refuses a folder that lacks one."""
    import json

    from caldera.experiments.report.rerun import claims_of_tables

    out = tmp_path / "out"
    assert main(["config/mini.yaml", str(ROOT / "paper_tables/generated"), str(out), "--from-tables",
                 "--tables", "table1_llama2_zeroshot", "table7_mistral"]) == 0
    got = json.loads((out / "claims.json").read_text())
    tables = {t: json.loads((ROOT / f"paper_tables/generated/{t}.json").read_text())
              for t in ("table1_llama2_zeroshot", "table7_mistral")}
    want, _ = claims_of_tables(tables)
    assert [(c["claim"], c["source"], c["verdict"]) for c in got] == [(c["claim"], c["source"], c["verdict"])
                                                                      for c in want]
    assert any(iv.get("paired_seeds") for c in got for iv in c.get("intervals", []))
    with pytest.raises(SystemExit):
        main(["config/mini.yaml", str(tmp_path), str(out), "--from-tables", "--tables", "table1_llama2_zeroshot"])
