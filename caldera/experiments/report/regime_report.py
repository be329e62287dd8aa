"""The stand-ins' regime as a report: which Q bits each stand-in is compressed at so that QuIP#'s perplexity on
held-out calibration text, relative to the dense model's, comes nearest the paper's own 2-bit QuIP# ratio for
the paper model it replaces (:func:`select_q_bits`), and the Markdown of every candidate's score
(:func:`to_markdown`). Pure: the measurements come from :mod:`caldera.experiments.jobs.regime`.

Score of a candidate ``b`` (Q bits): ``|ln r_b − ln r*|`` with ``r_b`` its perplexity ratio to the dense model
(the geometric mean over the compression seeds of the per-seed ratios) and ``r*`` the paper's ratio. The lowest
score wins; equal scores go to the fewer bits."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: each Q bits' backbone codebook (caldera.quantizers.quantizer_for_bits)
CODEBOOKS = {2: "E8P", 3: "E8P-RVQ3", 4: "E8P-RVQ4"}


def log_distance(ratio: float, target: float) -> float:
    """``|ln ratio − ln target|``: how far a perplexity ratio lies from the target ratio, in log-ratio."""
    for name, x in (("ratio", ratio), ("target", target)):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    return abs(math.log(ratio) - math.log(target))


def seed_ratio(ppls: Sequence[float], dense_ppl: float) -> float:
    """The perplexity ratio of a candidate over its seeds: ``exp(mean_s ln(ppl_s / dense_ppl))`` (the geometric
    mean of the per-seed ratios). Raises ``ValueError`` on no seeds or a perplexity that is not finite and > 0."""
    if not ppls:
        raise ValueError("ppls: no seed's perplexity; measure at least one seed")
    for name, x in [("dense_ppl", dense_ppl), *((f"ppls[{i}]", p) for i, p in enumerate(ppls))]:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
            raise ValueError(f"{name} must be a finite perplexity > 0, got {x!r}")
    return math.exp(sum(math.log(p / dense_ppl) for p in ppls) / len(ppls))


def select_q_bits(ratios: Mapping[int, float], target: float) -> dict[str, Any]:
    """The Q bits whose perplexity ratio ``ratios[b]`` (b: Q bits → compressed / dense perplexity) lies nearest
    ``target`` in log-ratio (:func:`log_distance`); equal scores go to the fewer bits. Returns
    ``{"q_bits": the choice, "target": target, "scores": {b: score}, "ratios": {b: ratio}}`` with every
    candidate's score, in ascending bits. Raises ``ValueError`` on no candidate or a bad ratio."""
    if not ratios:
        raise ValueError("ratios: no candidate; give the perplexity ratio of at least one Q bits")
    bits = sorted(int(b) for b in ratios)
    scores = {b: log_distance(float(ratios[b]), float(target)) for b in bits}
    chosen = min(bits, key=lambda b: (scores[b], b))
    return {"q_bits": chosen, "target": float(target), "scores": scores, "ratios": {b: float(ratios[b]) for b in bits}}


def summarize_model(measurements: Mapping[str, Any], target: Mapping[str, Any]) -> dict[str, Any]:
    """One stand-in's selection from its measurements ``{"dense": {"ppl"}, "candidates": {b: {"ppl_by_seed":
    {seed: ppl}}}}`` and its paper target (:func:`caldera.experiments.planning.regime_plan.paper_target`):
    :func:`select_q_bits` on the seed ratios (:func:`seed_ratio`), with each candidate's perplexities kept."""
    dense = float(measurements["dense"]["ppl"])
    cands = {int(b): c for b, c in measurements["candidates"].items()}
    ratios = {b: seed_ratio([float(p) for p in c["ppl_by_seed"].values()], dense) for b, c in cands.items()}
    sel = select_q_bits(ratios, float(target["ratio"]))
    sel["candidates"] = {b: {"codebook": CODEBOOKS.get(b, "?"), "ppl_by_seed": dict(cands[b]["ppl_by_seed"]),
                             "ratio": ratios[b], "score": sel["scores"][b]} for b in sorted(cands)}
    sel["dense_ppl"] = dense
    sel["paper"] = dict(target)
    return sel


def to_json_ready(res: Mapping[str, Any]) -> dict[str, Any]:
    """``res`` with every integer mapping key (Q bits, seeds) as a string: what JSON writes, so that a result read
    back from ``regime.json`` equals the one written."""
    if isinstance(res, Mapping):
        return {str(k): to_json_ready(v) for k, v in res.items()}
    if isinstance(res, list):
        return [to_json_ready(v) for v in res]
    return res


def to_markdown(res: Mapping[str, Any]) -> str:
    """``regime.md``: per stand-in, the paper's target ratio, every candidate's held-out calibration perplexity
    (per seed), ratio and score, and the choice; then how the held-out text was drawn. ``res`` as
    :func:`caldera.experiments.jobs.regime.step_regime` writes it (string or integer keys)."""
    lines = ["# Stand-in regime: the Q bits chosen on held-out calibration text", "",
             "Each stand-in's QuIP# is compressed at every candidate Q bits with the run's calibration Hessians and "
             "scored on held-out calibration windows (never the evaluation text). The chosen bits are those whose "
             "perplexity ratio to the dense model lies nearest, in log-ratio, the paper's own 2-bit QuIP# ratio "
             "for the paper model the stand-in replaces; equal scores go to the fewer bits.",
             "", f"Score: |ln(ratio) − ln(paper ratio)|; ratio: geometric mean over seeds {res['seeds']} of "
             "QuIP# / dense perplexity.", ""]
    for model, sel in res["models"].items():
        p = sel["paper"]
        lines += [f"## {model} (stands in for {p['paper_model']})", "",
                  f"Paper target ({p['table']}, {p['corpus']}): QuIP# 2-bit {p['quip_ppl']:g} / unquantized "
                  f"{p['dense_ppl']:g} = ×{p['ratio']:.3f}. Dense held-out calibration perplexity: "
                  f"{sel['dense_ppl']:.3f}.", "",
                  "| Q bits | codebook | held-out ppl (per seed) | ratio | score | |",
                  "|---:|---|---|---:|---:|---|"]
        chosen = str(sel["q_bits"])
        for b, c in sorted(sel["candidates"].items(), key=lambda kv: int(kv[0])):
            ppls = ", ".join(f"{float(x):.3f}" for x in c["ppl_by_seed"].values())
            mark = "**chosen**" if str(b) == chosen else ""
            lines.append(f"| {b} | {c['codebook']} | {ppls} | ×{c['ratio']:.3f} | {c['score']:.4f} | {mark} |")
        lines += ["", f"Chosen: **{chosen} bits** ({CODEBOOKS.get(int(chosen), '?')}).", ""]
    h = res["heldout"]
    last = h["first_row"] + h["n_windows"] - 1
    weights = "the reconstructed Ŵ" if res["reconstructed"] else "the compressed layers"
    lines += ["## Held-out text", "",
              f"{h['n_windows']} windows of {h['seq_len']} tokens from `{h['source']}` (calibration seed "
              f"{h['seed']}): the calibration sampler's rows {h['first_row']}–{last}, after the {h['first_row']} "
              f"rows the Hessians were collected on (no shared document). QuIP# params: `{res['quip_params']}`; "
              f"evaluated with {weights}.", ""]
    return "\n".join(lines)
