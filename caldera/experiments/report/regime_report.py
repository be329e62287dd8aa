"""The stand-ins' regime as a report: which Q bits each stand-in is compressed at so that QuIP#'s perplexity on
held-out calibration text, relative to the dense model's, comes nearest the paper's own 2-bit QuIP# ratio for
the paper model it replaces (:func:`select_q_bits`), and the Markdown of every candidate's score
(:func:`to_markdown`). Pure: the measurements come from :mod:`caldera.experiments.jobs.regime`.

Score of a candidate ``b`` (Q bits): ``|ln r_b − ln r*|`` with ``r_b`` its perplexity ratio to the dense model
(the geometric mean over the compression seeds of the per-seed ratios) and ``r*`` the paper's ratio. The lowest
score wins; equal scores go to the fewer bits. How firmly the measurement backs the choice is
:func:`choice_margin`: the runner-up's score minus the chosen one's, with a 95 % interval. Where the measurement
kept every window's loss, the interval counts both the seeds (paired: every candidate is compressed on the same
seeds) and the held-out windows (a sample of text, shared by every candidate and the dense model), combined in
quadrature as every claim's interval is (:func:`caldera.stats.combine`); otherwise the seeds alone (Welch)."""

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


def seed_spread(ppls: Sequence[float], dense_ppl: float) -> dict[str, Any] | None:
    """The per-seed spread of a candidate's log-ratio ``l_s = ln(ppl_s / dense_ppl)``: ``{"n", "mean", "sd"}`` with
    ``sd`` the sample standard deviation (``n − 1``) of ``l_s``, which is also the per-seed relative spread of the
    perplexity to first order; ``None`` for fewer than two seeds. Perplexities are checked as in
    :func:`seed_ratio`."""
    seed_ratio(ppls, dense_ppl)
    if len(ppls) < 2:
        return None
    logs = [math.log(p / dense_ppl) for p in ppls]
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    return {"n": len(logs), "mean": mean, "sd": sd}


def choice_margin(candidates: Mapping[int, Mapping[str, Any]], chosen: int, target: float,
                  dense_ppl: float, dense_windows: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """How far the chosen Q bits beat the runner-up: ``margin = score_u − score_c`` (``≥ 0``; the runner-up ``u``
    has the lowest score after the chosen ``c``, fewer bits first among equals) with a 95 % interval. With
    ``σ_b = sign(m_b − ln target)`` (``m_b`` the mean over seeds of the per-seed log-ratio ``l_{b,s}``),
    ``score_b = σ_b (m_b − ln target)``, so the margin is linear in the measurements to first order.

    * **Seeds and windows** (``dense_windows`` = ``{"window_nll", "window_tokens"}`` of the dense model and every
      candidate with ``window_nll_by_seed`` on the same seeds): the seed part is the t interval of the per-seed
      margins ``σ_u (l_{u,s} − ln target) − σ_c (l_{c,s} − ln target)`` (paired seeds), the window part the t
      interval over windows of ``σ_u D_{u,w} − σ_c D_{c,w}`` (``D_{b,w}``: window ``w``'s summed loss, averaged
      over seeds, minus the dense model's, per token; :func:`caldera.stats.ratio_t_interval`), combined in
      quadrature (:func:`caldera.stats.combine`). When the two candidates lie on opposite sides of the target the
      windows' shared difficulty adds up rather than cancels, so the window part is not small.
    * **Seeds alone** (no window losses, or different seeds): ``Var(margin) ≈ sd_u²/n_u + sd_c²/n_c``
      (:func:`seed_spread`) with Welch's df; the held-out windows are then taken as fixed.

    ``resolved``: the interval excludes 0. Returns ``{"runner_up", "margin", "half_width", "lo", "hi", "df",
    "resolved", "construction"}`` plus, with windows, ``"window_half"`` and ``"seed_half"`` (interval fields
    ``None`` when a candidate has one seed), or ``None`` with a single candidate. ``candidates``: ``{b:
    {"ppl_by_seed": {seed: ppl}, "score"[, "window_nll_by_seed": {seed: [summed nats per window]}]}}``."""
    from caldera.stats import t_quantile

    others = sorted((float(c["score"]), int(b)) for b, c in candidates.items() if int(b) != int(chosen))
    if not others:
        return None
    by_bits = {int(b): c for b, c in candidates.items()}
    u = others[0][1]
    margin = float(by_bits[u]["score"]) - float(by_bits[int(chosen)]["score"])
    out: dict[str, Any] = {"runner_up": u, "margin": margin, "half_width": None, "lo": None, "hi": None,
                           "df": None, "resolved": None, "construction": "seeds (Welch), windows fixed"}
    windowed = _window_margin(by_bits[u], by_bits[int(chosen)], margin, float(target), dense_windows)
    if windowed is not None:
        out.update(windowed)
        return out
    spreads = [seed_spread([float(p) for p in by_bits[b]["ppl_by_seed"].values()], dense_ppl) for b in (u, chosen)]
    if any(s is None for s in spreads):
        return out
    parts = [s["sd"] ** 2 / s["n"] for s in spreads]
    var = sum(parts)
    if var == 0.0:
        half, df = 0.0, float("inf")
    else:
        df = var ** 2 / sum(p ** 2 / (s["n"] - 1) for p, s in zip(parts, spreads))
        half = t_quantile(df) * math.sqrt(var)
    out.update(half_width=half, lo=margin - half, hi=margin + half, df=df, resolved=margin - half > 0.0)
    return out


def _window_margin(cu: Mapping[str, Any], cc: Mapping[str, Any], margin: float, target: float,
                   dense_windows: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The seeds-and-windows interval of :func:`choice_margin` (runner-up ``cu``, chosen ``cc``), or ``None`` when
    the window losses are missing or the two candidates were not measured on the same seeds."""
    import numpy as np

    from caldera.stats import combine, ratio_t_interval, seed_half_width

    if dense_windows is None or any("window_nll_by_seed" not in c for c in (cu, cc)):
        return None
    seeds_u, seeds_c = list(cu["window_nll_by_seed"]), list(cc["window_nll_by_seed"])
    if [str(s) for s in seeds_u] != [str(s) for s in seeds_c]:
        return None
    dense = np.asarray(dense_windows["window_nll"], dtype=np.float64)
    tokens = np.asarray(dense_windows["window_tokens"], dtype=np.float64)
    lt = math.log(target)
    mats, signs = [], []
    for c in (cu, cc):
        A = np.asarray([c["window_nll_by_seed"][s] for s in c["window_nll_by_seed"]], dtype=np.float64)
        if A.ndim != 2 or A.shape[1] != dense.size or tokens.shape != dense.shape:
            raise ValueError(f"window losses of shape {A.shape} do not match the dense model's {dense.shape} windows")
        if not (np.all(np.isfinite(A)) and np.all(np.isfinite(dense)) and np.all(tokens > 0)):
            raise ValueError("window losses must be finite and window token counts positive")
        mats.append(A - dense)  # (seeds, windows): summed nats above the dense model
        signs.append(1.0 if float((A - dense).sum(axis=1).mean() / tokens.sum()) >= lt else -1.0)
    (Du, Dc), (su, sc) = mats, signs
    per_seed = su * (Du.sum(axis=1) / tokens.sum() - lt) - sc * (Dc.sum(axis=1) / tokens.sum() - lt)
    win = ratio_t_interval(su * Du.mean(axis=0) - sc * Dc.mean(axis=0), tokens)
    shift = margin - win["estimate"]  # the constant ±ln target terms; the window interval moves with them
    seed = seed_half_width([per_seed])
    c = combine(margin, win["lo"] + shift, win["hi"] + shift, seed)
    half = None if seed["half"] is None else c["sdd"]
    return {"half_width": half, "lo": None if half is None else c["lo"], "hi": None if half is None else c["hi"],
            "df": seed["df"], "resolved": None if half is None else bool(c["lo"] > 0.0),
            "window_half": c["window_half"], "seed_half": seed["half"],
            "construction": "paired seeds and windows"}


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
                             "ratio": ratios[b], "score": sel["scores"][b],
                             "seed_spread": seed_spread([float(p) for p in cands[b]["ppl_by_seed"].values()], dense)}
                         for b in sorted(cands)}
    for b in sorted(cands):
        if "window_nll_by_seed" in cands[b]:
            sel["candidates"][b]["window_nll_by_seed"] = {s: [float(x) for x in v]
                                                          for s, v in cands[b]["window_nll_by_seed"].items()}
    d = measurements["dense"]
    dense_windows = ({"window_nll": [float(x) for x in d["window_nll"]],
                      "window_tokens": [float(x) for x in d["window_tokens"]]} if "window_nll" in d else None)
    sel["margin"] = choice_margin(sel["candidates"], sel["q_bits"], float(target["ratio"]), dense, dense_windows)
    if dense_windows is not None:
        sel["dense_windows"] = dense_windows
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


def margin_text(sel: Mapping[str, Any]) -> str:
    """One sentence on how firmly the seeds back ``sel``'s choice (its :func:`choice_margin`)."""
    m = sel.get("margin")
    if not m:
        return "One candidate: no margin."
    head = f"Margin over {m['runner_up']} bits: {m['margin']:.4f}"
    if m["half_width"] is None:
        return head + " (one seed: no interval; the seeds cannot say how firm the choice is)."
    windowed = m.get("construction") == "paired seeds and windows"
    what = "seeds and windows" if windowed else "seeds"
    verdict = (f"the {what} resolve the choice" if m["resolved"] else
               f"the {what} do not resolve the choice; the rule takes the nearer estimate")
    df = "" if m.get("df") is None else f", seed df {m['df']:.1f}" if windowed else f", df {m['df']:.1f}"
    parts = (f"; half-widths: windows {m['window_half']:.4f}, seeds {m['seed_half']:.4f}"
             if windowed and m.get("seed_half") is not None else "")
    return head + f" [{m['lo']:+.4f}, {m['hi']:+.4f}] (95 %, {what}{df}{parts}): {verdict}."


def _interval_words(res: Mapping[str, Any]) -> str:
    """How ``res``'s margins were estimated, in words (every model's margin, one sentence)."""
    kinds = {(sel.get("margin") or {}).get("construction") for sel in res["models"].values()} - {None}
    if kinds == {"paired seeds and windows"}:
        return ("the seeds (paired: the candidates share them) and the held-out windows (a sample of text, shared "
                "by every candidate and the dense model), combined in quadrature.")
    return "Welch's, from the seeds (the held-out windows are taken as fixed)."


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
             "QuIP# / dense perplexity; per-seed sd: the sample sd of the per-seed ln(ratio), about the relative "
             "spread of one realization's perplexity. Margin: the runner-up's score minus the chosen one's, with a "
             "95 % interval: " + _interval_words(res), ""]
    made = res.get("made_by")
    if made:
        lines[1:1] = ["", f"Made by `{made['command']}` at commit `{made['commit']}`."]
    for model, sel in res["models"].items():
        p = sel["paper"]
        lines += [f"## {model} (stands in for {p['paper_model']})", "",
                  f"Paper target ({p['table']}, {p['corpus']}): QuIP# 2-bit {p['quip_ppl']:g} / unquantized "
                  f"{p['dense_ppl']:g} = ×{p['ratio']:.3f}. Dense held-out calibration perplexity: "
                  f"{sel['dense_ppl']:.3f}.", "",
                  "| Q bits | codebook | held-out ppl (per seed) | ratio | per-seed sd | score | |",
                  "|---:|---|---|---:|---:|---:|---|"]
        chosen = str(sel["q_bits"])
        for b, c in sorted(sel["candidates"].items(), key=lambda kv: int(kv[0])):
            ppls = ", ".join(f"{float(x):.3f}" for x in c["ppl_by_seed"].values())
            mark = "**chosen**" if str(b) == chosen else ""
            spread = c.get("seed_spread")
            sd = "—" if not spread else f"{100 * spread['sd']:.1f} %"
            lines.append(f"| {b} | {c['codebook']} | {ppls} | ×{c['ratio']:.3f} | {sd} | {c['score']:.4f} | "
                         f"{mark} |")
        lines += ["", f"Chosen: **{chosen} bits** ({CODEBOOKS.get(int(chosen), '?')}). " + margin_text(sel), ""]
    h = res["heldout"]
    last = h["first_row"] + h["n_windows"] - 1
    weights = "the reconstructed Ŵ" if res["reconstructed"] else "the compressed layers"
    lines += ["## Held-out text", "",
              f"{h['n_windows']} windows of {h['seq_len']} tokens from `{h['source']}` (calibration seed "
              f"{h['seed']}): the calibration sampler's rows {h['first_row']}–{last}, after the {h['first_row']} "
              f"rows the Hessians were collected on (no shared document). QuIP# params: `{res['quip_params']}`; "
              f"evaluated with {weights}.", ""]
    return "\n".join(lines)
