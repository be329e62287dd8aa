# Table 5: low-rank adaptation of the top-r components of CALDERA's factors (caldera.finetune). One job per
# (row, task): re-split, fine-tune, evaluate the best-on-held-out and the final checkpoint. The table rule puts
# the measurements beside the paper's numbers; rows that config lora_ft.rows leaves out are marked pending.
# A row starts from its compressed checkpoint, or (RHT FT Yes) from rule rht_finetune's checkpoint of that variant
# (rhtft.smk); rule `evaluate` scores every row's starting model (the "no FT" column; common.smk FT_VARIANTS).
import re

from caldera.experiments.planning.loraft_rows import TASKS as LORA_TASKS
from caldera.experiments.planning.loraft_rows import lora_rows

LORA_ROWS = {r.id: r for r in lora_rows(config)}


wildcard_constraints:
    lora_row="|".join(map(re.escape, LORA_ROWS)) or "no-lora-rows",  # RHT-FT rows' ids contain "+"
    lora_task="|".join(LORA_TASKS),


rule lora_finetune:
    input:
        checkpoint=get_lora_checkpoint,
        assets=f"{RES}/assets.json",
    output:
        json=f"{RES}/lora/{{lora_row}}/{{lora_task}}.json",
    benchmark:
        f"{RES}/benchmarks/lora_finetune/{{lora_row}}_{{lora_task}}.tsv"
    log:
        f"{RES}/logs/lora/{{lora_row}}_{{lora_task}}.log",
    params:
        spec=lora_spec,
        work=get_lora_work_dir,
        row=get_lora_row,
        settings=SETTINGS.lora_ft,
        eval_settings=SETTINGS.eval,
        run=get_lora_run,
    resources:
        gpu=1,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/lora_finetune.py"


rule lora_table:
    input:
        get_lora_table_inputs,
    output:
        md=report(f"{TABLES_DIR}/table5_finetune.md", caption="../report/table5.rst", category="Tables"),
        tex=f"{TABLES_DIR}/table5_finetune.tex",
        csv=f"{TABLES_DIR}/table5_finetune.csv",
        json=f"{TABLES_DIR}/table5_finetune.json",
    benchmark:
        f"{RES}/benchmarks/lora_table/table5.tsv"
    log:
        f"{RES}/logs/tables/table5_finetune.log",
    params:
        spec=declared(SETTINGS.lora_ft and SETTINGS.lora_ft.as_block(), SETTINGS.eval.as_block()),
        results=get_results_dir,
        plan=get_table5_plan,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/lora_table.py"


# Without a lora_ft block, Table 5 holds the paper's numbers only and rule pending_table writes it; rule lora_table,
# whose outputs name no wildcard, would otherwise win Snakemake's choice between the two and find no plan.
if not config.get("lora_ft"):

    ruleorder: pending_table > lora_table
