"""Workflow step of RHT fine-tuning (rule ``rht_finetune``, Tables 3–4): a variant's checkpoint in, its fine-tuned
checkpoint (same format, ``signs_trainable`` layers) and a summary JSON out.

Data: ``rht_ft.n_samples`` sequences of ``rht_ft.seq_len`` tokens drawn from the run's calibration source
(``calibration.source``: ``lambada-books`` in mini, RedPajama at paper scale; never the evaluation text,
:func:`caldera.pipeline.text.calibration_sequences` refuses evaluation sources) with seed ``rht_ft.seed``; the
last ``rht_ft.held_out`` are held out for choosing the epoch, as the authors hold out their last 64 of 256
(authors-code.md §6). Training itself is :func:`caldera.finetune.rht.rht_finetune`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from caldera.experiments.planning.plan import Variant
from caldera.experiments.planning.settings import RhtFtSettings, RunContext


def finetune_data(settings: RhtFtSettings, source: str, tokenizer) -> tuple[Any, Any]:
    """``(train_ids, heldout_ids)``: (n_samples − held_out, seq_len) and (held_out, seq_len) int64, drawn from
    text source ``source`` (the run's ``calibration.source``)."""
    from caldera.pipeline.text import calibration_sequences

    ft = settings
    ids = calibration_sequences(tokenizer, ft.n_samples, ft.seq_len, ft.seed, source=source)
    return ids[: -ft.held_out], ids[-ft.held_out :]


def step_rht_finetune(settings: RhtFtSettings, run: RunContext, source: str, v: Variant, checkpoint: str,
                      out_dir: str, summary_out: str, state_path: str | None = None) -> dict[str, Any]:
    """Fine-tune the RHT signs of variant ``v``'s checkpoint against its dense model (``run``: its entry and the
    device) with ``settings`` on text source ``source`` (``calibration.source``); write the fine-tuned
    checkpoint to ``out_dir`` (:func:`caldera.pipeline.checkpoint.save_compressed`, the base checkpoint's method
    and method config, plus an ``rht_ft`` record) and the summary (history, best epoch, wall time) to
    ``summary_out``. ``state_path``: per-epoch resume state (:func:`caldera.finetune.rht.rht_finetune`), removed
    once the summary is written. What depends on the run's clock or on whether it was resumed (the seconds, the
    epoch it resumed from) goes to the summary's timing file, so a killed and resumed job writes the same bytes."""
    from caldera.atomic import write_result
    from caldera.experiments.jobs.models import load_dense, run_device
    from caldera.finetune.rht import rht_finetune
    from caldera.pipeline.checkpoint import load_compressed, read_config, save_compressed

    t0 = time.perf_counter()
    device = run_device(run)
    cfg = settings.finetune_config()
    student, tok = load_compressed(checkpoint)
    teacher, dense_tok = load_dense(run, v.model, device)
    tok = tok or dense_tok
    train, held = finetune_data(settings, source, tok)
    student = student.to(device)
    res = rht_finetune(student, teacher, train.to(device), held.to(device), cfg, state_path=state_path)
    record = {"config": settings.training(), "source": source,
              "n_train": int(train.shape[0]), "n_heldout": int(held.shape[0]), "base_checkpoint": str(checkpoint),
              "best_epoch": res["best_epoch"],
              # the seconds of each epoch go to the timing file: the checkpoint and summary hold no clock reading
              "history": [{k: x for k, x in h.items() if k != "wall_s"} for h in res["history"]]}
    base_cfg = read_config(checkpoint)
    save_compressed(student.cpu(), out_dir, method=base_cfg["method"], method_config=base_cfg["method_config"],
                    tokenizer=tok, extra={"rht_ft": record})
    summary = {"variant": v.id, **record, "heldout_kl_before": res["heldout_kl_before"],
               "heldout_kl_best": res["heldout_kl_best"], "n_sign_params": res["n_params"]}
    write_result(summary_out, summary, {"wall_s": time.perf_counter() - t0,
                                        "epoch_wall_s": [h.get("wall_s") for h in res["history"]],
                                        "resumed_from": res["resumed_from"]})
    if state_path is not None:
        Path(state_path).unlink(missing_ok=True)
    return summary
