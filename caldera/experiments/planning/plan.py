"""From a workflow config to the set of models to compress and evaluate for every paper table.

Each row of a paper table (``caldera.paper_reference``) is mapped to a *variant* of this run:

* the paper model (``llama-2-7b`` …) → its stand-in (``config["stand_ins"]``, e.g. SmolLM2-135M offline);
* the paper rank k at B_LR bits → the stand-in rank with the closest average bits per parameter
  (``caldera.bits.rank_for_bits``, App. E.5 formula), so rows compare at equal bits;
* the paper method → a registered method: CALDERA → ``caldera``, QuIP# (rank 0) → ``quip#``, QuIP# with a
  16-bit low-rank part → ``quip#-lr``, Unquantized → the dense model.

``config["extra_methods"]`` adds rows for any other registered method to every zero-shot table, so a new
method enters the tables by editing config only. Variant ids are filesystem-safe strings.

Every variant carries its method's typed, validated config object (``Variant.config``, built through the
method registry when the plan is made), and :func:`check_config` checks everything the JSON schema cannot
(registered methods, presets and parameters, stand-ins, layers, text sources, zero-shot tasks), so that a
bad config fails ``snakemake -n`` with a message naming the key, never a job hours later.

The row → variant mapping itself (:class:`Variant`, :func:`variant_for_row`, :func:`mapped_rank`, …) lives in
:mod:`caldera.experiments.planning.variants` and is re-exported here; Table 5's rows in
:mod:`caldera.experiments.planning.loraft_rows`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from caldera.bits import CONFIG_NUM_HIDDEN_LAYERS, CONFIG_SHAPES
from caldera.experiments.planning.regime_rows import (
    base_table,
    is_regime_table,
    regime_table_rows,
    regime_tables,
)
from caldera.experiments.planning.regime_rows import (
    regime_errors as regime_run_errors,
)
from caldera.experiments.planning.variants import (  # noqa: F401 - the row -> variant mapping, re-exported from here
    RHTFT_SUFFIX,
    RHTFT_TABLES,
    TABLE_PARAMS,
    ZERO_SHOT_TABLES,
    Variant,
    _safe,
    caldera_params,
    make_variant,
    mapped_rank,
    method_config,
    rank_at_equal_bits,
    variant_for_row,
)
from caldera.paper_reference import load_reference_table
from caldera.pipeline.linears import SHORT_NAMES

PENDING_TABLES = {
    "table3_llama2_rhtft": "RHT fine-tuning: measured when the config's tables list it (caldera.finetune.rht)",
    "table4_llama3_rhtft": "RHT fine-tuning: measured when the config's tables list it (caldera.finetune.rht)",
    "table5_finetune": "LoRA fine-tuning: measured when the config has a lora_ft section (caldera.finetune)",
}


def pending_tables(config: dict[str, Any]) -> dict[str, str]:
    """:data:`PENDING_TABLES` that this run does not build with measurements (``config["tables"]``; Table 5 with
    a ``lora_ft`` section)."""
    return {t: why for t, why in PENDING_TABLES.items()
            if t not in config["tables"] and not (t == "table5_finetune" and config.get("lora_ft"))}


def _is_paper_row(want: dict[str, Any], ref: dict[str, Any]) -> bool:
    """Is the paper table's row ``ref`` the row ``want`` names (method, paper rank, B_LR as the config writes it)?"""
    rank = int(ref["rank"]) if ref.get("rank") not in (None, "") else 0
    b_lr = int(float(ref["b_lr"])) if ref.get("b_lr") not in (None, "") else None
    return want["method"] == ref["method"] and int(want["rank"]) == rank and want.get("b_lr") == b_lr


def _rhtft_selected(config: dict[str, Any], ref: dict[str, Any]) -> bool:
    """Is this paper row among ``rht_ft.rows`` (null: every row)? Matched on method, paper rank and B_LR."""
    want = config["rht_ft"].get("rows")
    return want is None or any(_is_paper_row(w, ref) for w in want)


def claims_errors(config: dict[str, Any]) -> list[str]:
    """The problems of the ``claims`` items (:func:`caldera.experiments.planning.settings.declared_claims`): their
    keys and values, a ``table`` that is not a zero-shot table of this run, a ``paper_model`` without rows in it,
    and a row ``a`` / ``b`` that is not a row of that table's paper model in the paper; each names its key path."""
    from caldera.experiments.planning.settings import declared_claims

    try:
        declared_claims(config)
    except ValueError as e:
        return [str(e)]
    errors = []
    run_tables = [t for t in config["tables"] if t in ZERO_SHOT_TABLES]
    for i, item in enumerate(config.get("claims") or []):
        where = f"claims[{i}]"
        if item["table"] not in run_tables:
            errors.append(f"{where}.table: {item['table']!r} is not a zero-shot table of this run ({run_tables})")
            continue
        ref = load_reference_table(item["table"])
        rows = [r for r in ref if r["model"] == item["paper_model"]]
        if not rows:
            errors.append(f"{where}.paper_model: {item['paper_model']!r} has no row in {item['table']}; accepted: "
                          f"{sorted({r['model'] for r in ref})}")
            continue
        for side in ("a", "b"):
            if not any(_is_paper_row(item[side], r) for r in rows):
                have = sorted({(r["method"], int(r["rank"] or 0), r["b_lr"]) for r in rows}, key=str)
                errors.append(f"{where}.{side}: {item[side]} is no row of {item['table']} [{item['paper_model']}]; "
                              f"rows are (method, rank, b_lr) of {have}")
    return errors


def rhtft_rows(config: dict[str, Any], table: str) -> list[dict[str, Any]]:
    """Rows of an RHT fine-tuning table (:data:`RHTFT_TABLES`): ``{"ref", "variant", "base"}`` where ``base`` is
    the variant of the same paper row in the un-fine-tuned table (compressed by the usual rules) and
    ``variant`` its fine-tuned copy (id + :data:`RHTFT_SUFFIX`); rows outside ``rht_ft.rows`` get
    ``variant=None`` and a ``pending`` note."""
    if "rht_ft" not in config:
        raise ValueError(f"tables: {table} needs the `rht_ft:` block (RHT fine-tuning settings; see config/mini.yaml)")
    keep = config.get("paper_ranks")
    rows = []
    for ref in load_reference_table(table):
        base = variant_for_row(config, ref)
        if keep is not None and base is not None and base.rank and int(ref["rank"]) not in keep:
            base = None
        if base is None:
            rows.append({"ref": ref, "variant": None, "base": None})
        elif not _rhtft_selected(config, ref):
            rows.append({"ref": ref, "variant": None, "base": None,
                         "pending": f"pending in {config['name']} (not in rht_ft.rows)"})
        else:
            rows.append({"ref": ref, "variant": dataclasses.replace(base, id=base.id + RHTFT_SUFFIX), "base": base})
    return rows


def rhtft_variants(config: dict[str, Any]) -> dict[str, tuple[Variant, Variant]]:
    """``{fine-tuned id: (fine-tuned variant, base variant)}`` over the RHT-FT tables of ``config["tables"]`` and
    Table 5's RHT-FT rows (:func:`caldera.experiments.planning.loraft_rows.lora_rhtft_variants`: LoRA starts from
    them). One
    base variant has one fine-tuned copy, shared by every table that lists it."""
    out = {r["variant"].id: (r["variant"], r["base"]) for t in config["tables"] if t in RHTFT_TABLES
           for r in rhtft_rows(config, t) if r["variant"] is not None}
    if config.get("lora_ft"):
        from caldera.experiments.planning.loraft_rows import lora_rhtft_variants

        for vid, pair in lora_rhtft_variants(config).items():
            out.setdefault(vid, pair)
    return out


def table_rows(config: dict[str, Any], table: str) -> list[dict[str, Any]]:
    """Reference rows of a zero-shot table with their variant (None: not run here) plus the extra rows (an
    RHT fine-tuning table: :func:`rhtft_rows`; a regime table ``<table>_regime``:
    :func:`~caldera.experiments.planning.regime_rows.regime_table_rows`)."""
    if table in RHTFT_TABLES:
        return rhtft_rows(config, table)
    if is_regime_table(table):
        return regime_table_rows(config, table_rows(config, base_table(table)))
    rows = []
    keep = config.get("paper_ranks")  # optional: run only rows with these paper ranks (rank-0 rows always run)
    for ref in load_reference_table(table):
        v = variant_for_row(config, ref)
        if keep is not None and v is not None and v.rank and int(ref["rank"]) not in keep:
            v = None
        rows.append({"ref": ref, "variant": v})
    stand_ins = sorted({config["stand_ins"][r["ref"]["model"]] for r in rows if r["variant"] is not None})
    for i, extra in enumerate(config.get("extra_methods", [])):
        if extra.get("beside") is not None:
            rows = _beside_rows(rows, extra, i)
            continue
        for model in stand_ins:
            v = make_variant(model, extra["method"], dict(extra.get("params", {})), 0, None, extra["name"],
                             f"extra_methods[{i}] ({extra['name']})")
            rows.append({"ref": None, "variant": v, "label": extra["name"]})
    return rows


def _beside_rows(rows: list[dict[str, Any]], extra: dict[str, Any], i: int) -> list[dict[str, Any]]:
    """``rows`` with a row of ``extra`` right after each uniform-rank CALDERA row whose variant id matches a
    pattern of ``extra["beside"]`` (``fnmatch``; ``"*"``: every one): the same model, rank and factor bits, the
    CALDERA row's parameters updated by ``extra["params"]``; ``beside`` names the CALDERA variant it is
    compared with at equal bits."""
    import fnmatch

    out = []
    for row in rows:
        out.append(row)
        v = row["variant"]
        if row.get("ref") is None or v is None or v.method != "caldera":
            continue
        if not any(fnmatch.fnmatchcase(v.id, pat) for pat in extra["beside"]):
            continue
        params = {**v.params, **extra.get("params", {})}
        x = make_variant(v.model, extra["method"], params, v.rank, v.b_lr, extra["name"],
                         f"extra_methods[{i}] ({extra['name']}, beside {v.id})")
        out.append({"ref": None, "variant": x, "label": extra["name"], "beside": v.id})
    return out


def has_model_plan(v: Variant) -> bool:
    """Does ``v``'s method choose settings per matrix from the whole model (a
    :class:`~caldera.methods.registry.ModelPlan`: rules profile_layers and allocate run before it compresses)?"""
    from caldera.methods import get_method

    return v.method != "dense" and get_method(v.method).plan is not None


def all_variants(config: dict[str, Any]) -> dict[str, Variant]:
    out: dict[str, Variant] = {}
    for table in config["tables"]:
        for row in table_rows(config, table):
            v = row.get("base", row["variant"])  # an RHT-FT row: its base variant (compressed by the usual rules)
            if v is not None:
                out[v.id] = v
    if config.get("lora_ft"):  # Table 5's compressed models (its LoftQ rows are compressed only for it)
        from caldera.experiments.planning.loraft_rows import lora_variants

        for vid, v in lora_variants(config).items():
            out.setdefault(vid, v)
    for table in regime_tables(config):  # rows compressed again at the stand-ins' regime bits (regime.run)
        for row in table_rows(config, table):
            if row["variant"] is not None:
                out.setdefault(row["variant"].id, row["variant"])
    return {vid: offset_seed(config, v) for vid, v in out.items()}


def offset_seed(config: dict[str, Any], v: Variant) -> Variant:
    """``v`` with its method seed raised by ``config["seed_offset"]`` (default 0: unchanged): a fresh-seed rerun
    of the whole run (``--config seed_offset=100 name=… tables_dir=…``) gives every compressed variant, and each
    seed replicate, new realizations under the same ids."""
    off = int(config.get("seed_offset") or 0)
    if not off or v.config is None or not hasattr(v.config, "seed"):
        return v
    params = {**v.params, "seed": int(v.config.seed) + off}
    return dataclasses.replace(v, params=params, config=method_config(v.method, params, "seed_offset"))


#: A seed replicate's id is its variant's id plus this suffix and the seed (``_safe`` ids never end so otherwise).
REPLICATE_SUFFIX = "-seed"


def is_random(v: Variant) -> bool:
    """Is ``v`` one realization of a random procedure? A compressed model of a random method is (RHT signs and
    sketches are seeded: :attr:`caldera.methods.registry.MethodSpec.random`); the dense model and a
    deterministic method's model are not: the same inputs give the same model, so it has no realization spread
    (on another CPU its last bits may differ, without the amplification that a changed E8P code gets)."""
    from caldera.methods import get_method

    return v.method != "dense" and get_method(v.method).random


def method_family(v: Variant) -> str:
    """The realization family of ``v``'s method (:attr:`caldera.methods.registry.MethodSpec.family`)."""
    from caldera.methods import get_method

    return "dense" if v.method == "dense" else get_method(v.method).family


def replicate_variants(config: dict[str, Any], variants: dict[str, Variant]) -> dict[str, list[Variant]]:
    """``{variant id: [the variant, its replicate for each of its seeds, …]}`` for every compressed variant whose
    id matches a pattern of ``replicates.variants`` (``fnmatch``; ``"*"``: all) and whose method takes a ``seed``:
    the same method, parameters and rank, compressed again with ``params.seed = s`` (every per-layer seed is
    derived from it: :func:`caldera.pipeline.compress.group_seed`). A pattern is a string (its variants take
    ``replicates.seeds``) or ``{pattern, seeds}`` (its own seeds); the first pattern a variant matches gives its
    seeds. Empty without a ``replicates`` block. The realizations are listed in seed order, the variant's own seed
    first."""
    import fnmatch

    rep = config.get("replicates")
    if not rep:
        return {}
    out: dict[str, list[Variant]] = {}
    for vid, v in sorted(variants.items()):
        if v.replicate_of is not None or v.config is None or not hasattr(v.config, "seed") or not is_random(v):
            continue
        seeds = next((s for pat, s in replicate_patterns(rep) if fnmatch.fnmatchcase(vid, pat)), None)
        if not seeds:
            continue
        reps = [v]
        off = int(config.get("seed_offset") or 0)
        for i, s in enumerate(seeds):
            params = {**v.params, "seed": int(s) + off}
            reps.append(Variant(f"{vid}{REPLICATE_SUFFIX}{int(s)}", v.model, v.method, params, v.rank, v.b_lr,
                                method_config(v.method, params, f"replicates.seeds[{i}]"), replicate_of=vid))
        out[vid] = reps
    return out


def replicate_patterns(rep: dict[str, Any]) -> list[tuple[str, list[int]]]:
    """``[(fnmatch pattern, its seeds)]`` of a ``replicates`` block, in order: a string entry of ``variants``
    takes ``seeds``, a ``{pattern, seeds}`` entry its own."""
    default = [int(s) for s in rep.get("seeds", [])]
    return [(p, default) if isinstance(p, str) else (p["pattern"], [int(s) for s in p["seeds"]])
            for p in rep.get("variants", [])]


def check_replicates(config: dict[str, Any], variants: dict[str, Variant]) -> list[str]:
    """Problems of the ``replicates`` block, each naming its key: seeds that repeat or equal a variant's own
    seed (that realization exists already), patterns that match no compressed, seeded variant, and corpora that
    are not perplexity corpora of the run."""
    import fnmatch

    rep = config.get("replicates")
    if not rep:
        return []
    errors = []
    seeded = {vid: v for vid, v in variants.items()
              if v.config is not None and hasattr(v.config, "seed") and is_random(v)}
    off = int(config.get("seed_offset") or 0)
    keys = ["replicates.seeds"] + [f"replicates.variants[{i}].seeds" for i, p in enumerate(rep.get("variants", []))
                                   if not isinstance(p, str)]
    lists = [[int(s) for s in rep.get("seeds", [])]] + [[int(s) for s in p["seeds"]]
                                                         for p in rep.get("variants", []) if not isinstance(p, str)]
    plain = [i for i, p in enumerate(rep.get("variants", [])) if isinstance(p, str)]
    if plain and not lists[0]:
        errors.append(f"replicates.seeds: empty, so replicates.variants{plain} would replicate nothing; list at least "
                      "one seed (or give those patterns their own: {pattern, seeds})")
    for key, seeds in zip(keys, lists):
        if len(set(seeds)) != len(seeds):
            errors.append(f"{key}: {seeds} repeats a seed; each seed is one more realization")
        own = sorted({v.config.seed for v in seeded.values()} & {s + off for s in seeds})
        if own:
            errors.append(f"{key}: {own} is a variant's own seed (methods.*.params.seed); pick other seeds")
    unknown = [c for c in rep.get("corpora") or [] if c not in (config.get("eval") or {}).get("ppl", {})]
    if unknown:
        errors.append(f"replicates.corpora: {unknown} not a perplexity corpus of this run; the corpora are the keys "
                      f"of eval.ppl: {sorted((config.get('eval') or {}).get('ppl', {}))}")
    for i, (pat, _) in enumerate(replicate_patterns(rep)):
        if not any(fnmatch.fnmatchcase(vid, pat) for vid in seeded):
            determ = sorted(vid for vid, v in variants.items() if fnmatch.fnmatchcase(vid, pat) and not is_random(v))
            why = (f" ({', '.join(determ)}: deterministic, no realization spread, nothing to replicate; remove the "
                   "pattern)" if determ else "")
            errors.append(f"replicates.variants[{i}]: {pat!r} matches no random compressed variant{why}; random "
                          f"variants of this run: {sorted(seeded)}")
    return errors


def shape_errors(config: dict[str, Any], variants: dict[str, Variant]) -> list[str]:
    """Every variant's method config against every matrix shape of its model (``models.<m>.shapes`` in
    :data:`caldera.bits.CONFIG_SHAPES`): a rank too large for some matrix, or a size the method cannot take
    (:meth:`caldera.methods.registry.MethodSpec.check_shapes`), found when the plan is made, not hours into a
    run. One message per variant, naming it, its method, model and the matrices."""
    from caldera.methods import get_method

    extra = {_safe(f"{m}-{e['name']}"): f"extra_methods[{i}] ({e['name']}), "
             for i, e in enumerate(config.get("extra_methods", [])) for m in config["models"]}
    errors = []
    for vid, v in sorted(variants.items()):
        if v.config is None:
            continue
        key = config["models"][v.model]["shapes"]
        shapes = dict(zip(SHORT_NAMES, CONFIG_SHAPES[key]))
        where = f"{extra.get(vid, '')}variant {vid} (models.{v.model}, shapes {key})"
        try:
            get_method(v.method).check_shapes(v.config, shapes, where)
        except ValueError as e:
            errors.append(str(e))
    return errors


def _beside_errors(config: dict[str, Any]) -> list[str]:
    """``extra_methods[i].beside`` patterns that match no uniform-rank CALDERA row of this run's tables."""
    import fnmatch

    errors = []
    extras = [(i, e) for i, e in enumerate(config.get("extra_methods", [])) if e.get("beside") is not None]
    if not extras:
        return errors
    plain = {**config, "extra_methods": []}
    ids = sorted({r["variant"].id for t in config["tables"] if t in ZERO_SHOT_TABLES for r in table_rows(plain, t)
                  if r["variant"] is not None and r["variant"].method == "caldera"})
    for i, e in extras:
        for j, pat in enumerate(e["beside"]):
            if not any(fnmatch.fnmatchcase(x, pat) for x in ids):
                errors.append(f"extra_methods[{i}].beside[{j}]: {pat!r} matches no CALDERA row of the tables "
                              f"{config['tables']}; CALDERA variants: {ids}")
    return errors


def claim_tasks(config: dict[str, Any]) -> dict[str, list[str]]:
    """``zeroshot_claims.tasks`` with full task names: model key → the tasks its zero-shot claims pool (a model
    absent pools every task)."""
    from caldera.eval.zeroshot import task_name

    tasks = ((config.get("zeroshot_claims") or {}).get("tasks")) or {}
    return {m: [task_name(t) for t in ts] for m, ts in tasks.items()}


def zeroshot_claims_errors(config: dict[str, Any]) -> list[str]:
    """Problems of ``zeroshot_claims.tasks`` against this run, each naming its key: a model that is not a key of
    ``models``, or a task that ``eval.zeroshot.tasks`` does not evaluate."""
    from caldera.eval.zeroshot import task_names

    try:
        evaluated = task_names(config["eval"]["zeroshot"]["tasks"])
    except ValueError:  # an unknown task: check_config names it
        evaluated = []
    errors = []
    for m, ts in claim_tasks(config).items():
        if m not in config["models"]:
            errors.append(f"zeroshot_claims.tasks.{m}: not a key of models ({sorted(config['models'])}); name a "
                          "stand-in of this run, or remove the entry")
            continue
        bad = [t for t in ts if t not in evaluated]
        if bad:
            errors.append(f"zeroshot_claims.tasks.{m}: {bad} are not evaluated (eval.zeroshot.tasks: "
                          f"{config['eval']['zeroshot']['tasks']}); add them there or remove them here")
    return errors


def check_config(config: dict[str, Any]) -> dict[str, Variant]:
    """Check what the JSON schema cannot, against the library; return :func:`all_variants`.

    Raises ``ValueError`` listing every problem, one a line, each starting with its config key: stand-ins that
    are not paper models or not ``models`` keys, parameters the table sets per row (:data:`TABLE_PARAMS`),
    unknown methods, presets, parameters (:func:`~caldera.experiments.planning.config_guard.unknown_param_errors`,
    with the
    closest name) or parameter values (every variant's config is built through the registry), every typed
    block's unknown keys, missing keys and values (:func:`caldera.experiments.planning.settings.block_settings`:
    ``selection``, ``rht_ft``, ``lora_ft``, ``throughput``, ``eval``, ``figures``), a rank or size that some
    matrix of the variant's model cannot take (:func:`shape_errors`), ``layers`` beyond a
    model's decoder layers, unknown text sources and zero-shot tasks, a Figure 3/4 setup that does not fit, and
    ``claims`` items whose rows are not the paper's (:func:`claims_errors`).
    """
    from caldera.algorithm.config import PRESETS
    from caldera.eval.zeroshot import TASKS, task_name
    from caldera.experiments.planning.config_guard import plan_time_errors, unknown_param_errors
    from caldera.experiments.planning.regime_plan import regime_errors
    from caldera.experiments.planning.settings import block_settings
    from caldera.pipeline.text import HF_TEXT, TEXT_SOURCES

    errors: list[str] = []
    models = config["models"]
    paper_models = sorted({r["model"] for t in ZERO_SHOT_TABLES for r in load_reference_table(t)})
    for pm, si in config["stand_ins"].items():
        if pm not in paper_models:
            errors.append(f"stand_ins.{pm}: not a model of the paper's tables; accepted: {paper_models}")
        if si not in models:
            errors.append(f"stand_ins.{pm}: {si!r} is not a key of models ({sorted(models)})")
    for method, keys in TABLE_PARAMS.items():
        given = {"params": config["methods"][method]["params"],
                 **{f"params_by_b_lr.{b}": p for b, p in config["methods"][method].get("params_by_b_lr", {}).items()}}
        for where, params in given.items():
            bad = sorted(set(params) & set(keys))
            if bad:
                errors.append(f"methods.{method}.{where}: {bad} are set per row by the paper table (rank and bits "
                              "mapped to the stand-in); remove them")
    names = [e["name"] for e in config.get("extra_methods", [])]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        errors.append(f"extra_methods: names {dup} appear more than once")
    errors += unknown_param_errors(config)  # typos of method parameters, with the closest name
    # every typed block (caldera.experiments.planning.settings): unknown keys, missing keys and bad values, by path
    try:
        block_settings(config)
    except ValueError as e:
        errors.append(str(e))
    errors += regime_errors(config)  # the regime's stand-ins, the paper models they replace, the paper's targets
    if errors:  # the variants below would only repeat these
        raise ValueError("\n".join(errors))
    try:
        variants = all_variants(config)
    except ValueError as e:
        errors.append(str(e))
        variants = {}
    errors += shape_errors(config, variants)
    if variants:
        errors += _beside_errors(config)
        errors += regime_run_errors(config, variants)  # regime.run: its tables and 2-bit variants
    layers = config.get("layers")
    for m in sorted({v.model for v in variants.values()} | {config["figures"]["model"]} & set(models)):
        n = int(models[m]["num_layers"])
        bad = [x for x in layers or [] if not 0 <= int(x) < n]
        if bad:
            errors.append(f"layers: {bad} out of range for models.{m} ({n} decoder layers: 0..{n - 1})")
        if CONFIG_NUM_HIDDEN_LAYERS.get(models[m]["shapes"], n) != n:
            errors.append(f"models.{m}: num_layers {n}, but {models[m]['shapes']!r} has "
                          f"{CONFIG_NUM_HIDDEN_LAYERS[models[m]['shapes']]} decoder layers")
    sources = sorted(TEXT_SOURCES) + sorted(HF_TEXT)
    if config["calibration"]["source"] not in sources:
        errors.append(f"calibration.source: {config['calibration']['source']!r} unknown; accepted: {sources}")
    for corpus, spec in config["eval"]["ppl"].items():
        if spec["source"] not in sources:
            errors.append(f"eval.ppl.{corpus}.source: {spec['source']!r} unknown; accepted: {sources}")
    tasks = [*TASKS, "caldera_zeroshot"]
    for t in config["eval"]["zeroshot"]["tasks"]:
        if task_name(t) not in tasks:
            errors.append(f"eval.zeroshot.tasks: {t!r} unknown; accepted: {tasks}")
    errors += zeroshot_claims_errors(config)  # the tasks the zero-shot claims pool: evaluated ones
    ft = config.get("rht_ft")
    if ft is not None:  # held_out < n_samples: RhtFtSettings
        refs = [r for t in RHTFT_TABLES for r in load_reference_table(t)]
        for i, w in enumerate(ft.get("rows") or []):
            if not any(_rhtft_selected({"rht_ft": {"rows": [w]}}, r) for r in refs):
                have = sorted({(r["method"], int(r["rank"] or 0), r["b_lr"]) for r in refs}, key=str)
                errors.append(f"rht_ft.rows[{i}]: {w} matches no row of {sorted(RHTFT_TABLES)}; rows are "
                              f"(method, rank, b_lr) of {have}")
    for task, spec in (config.get("lora_ft") or {}).get("tasks", {}).items():
        for key in ("train_source", "heldout_source"):
            src = spec.get(key)
            if src is None:
                continue
            if task != "wiki":
                errors.append(f"lora_ft.tasks.{task}.{key}: only the wiki task takes text sources (rte / "
                              "winogrande: train_split)")
            elif src not in sources:
                errors.append(f"lora_ft.tasks.wiki.{key}: {src!r} unknown; accepted: {sources}")
            elif src == config["eval"]["ppl"].get("wiki", {}).get("source"):
                errors.append(f"lora_ft.tasks.wiki.{key}: {src!r} is the evaluation text (eval.ppl.wiki.source); "
                              "name its train / validation split (e.g. wikitext2-train), or leave it unset")
        if spec.get("train_split") is not None and task == "wiki":
            errors.append("lora_ft.tasks.wiki.train_split: the wiki task takes train_source (a text source)")
        if spec.get("n_train") is None and task != "wiki" and spec.get("train_split") is None:
            errors.append(f"lora_ft.tasks.{task}.n_train: null (all) needs train_split (offline, the training "
                          "documents are drawn from the validation documents left after the evaluation ones)")
    fc = config["figures"]
    if fc["model"] not in models:
        errors.append(f"figures.model: {fc['model']!r} is not a key of models ({sorted(models)})")
    elif config["stand_ins"].get(fc["paper_model"]) != fc["model"]:
        errors.append(f"figures.paper_model: {fc['paper_model']!r} must have figures.model {fc['model']!r} as its "
                      "stand-in (stand_ins), so that its ranks map to that model")
    elif not 0 <= fc["layer"] < int(models[fc["model"]]["num_layers"]):
        errors.append(f"figures.layer: {fc['layer']} out of range for models.{fc['model']}")
    elif layers is not None and fc["layer"] not in layers:
        errors.append(f"figures.layer: {fc['layer']} has no Hessians: it is not in layers {layers}")
    for a in fc["ablations"]:
        if a not in PRESETS:
            errors.append(f"figures.ablations: {a!r} is not a CALDERA preset; accepted: {sorted(PRESETS)}")
    errors += check_replicates(config, variants)
    errors += claims_errors(config)
    errors += plan_time_errors(config)  # non-finite numbers, selection, asset names, ranks, lengths, duplicates
    if errors:
        raise ValueError("\n".join(errors))
    return variants


def effective_settings(config: dict[str, Any], variants: dict[str, Variant]) -> dict[str, Any]:
    """What this run will do, as the workflow prints it at parse time: run name, models, calibration,
    evaluation, and each method's typed config (``{method: {field: value}}``; a parameter the table sets per
    row, e.g. CALDERA's rank, is shown as the set of values the rows use)."""
    import dataclasses

    from caldera.experiments.planning.settings import EvalSettings

    methods: dict[str, dict[str, Any]] = {}
    for v in sorted(variants.values(), key=lambda v: v.id):
        if v.config is None:
            continue
        fields = dataclasses.asdict(v.config)
        cur = methods.setdefault(v.method, {k: [] for k in fields})
        for k, val in fields.items():
            if str(val) not in map(str, cur[k]):
                cur[k].append(val)
    methods = {m: {k: vals[0] if len(vals) == 1 else sorted(vals, key=lambda x: (x is None, x))
                   for k, vals in f.items()} for m, f in methods.items()}
    return {"name": config["name"], "models": {m: s["source"] for m, s in config["models"].items()},
            "layers": config.get("layers"), "calibration": config["calibration"],
            "eval": EvalSettings.from_block(config["eval"]).as_block(),
            "methods": methods, "variants": sorted(variants)}
