"""Hand-made result tables that the claim tests share: Table 1's 7B/13B/70B blocks with per-window samples, extra
seed realizations of a variant, a table with an ``extra_methods`` row, and Table 6's interleaved rounds."""

from __future__ import annotations

import math

import numpy as np

N_WIN, TOK = 8, 100


def row(model, method, rank, b_lr, ours, paper, stand_in, variant=None):
    return {"variant": variant or f"{stand_in}-{method}-{rank}", "paper_model": model, "method": method,
            "paper_rank": rank, "rank": rank, "b_lr": b_lr, "stand_in": stand_in, "ours": {"wiki2_ppl": ours},
            "paper": {"wiki2_ppl": paper}}


def windows(ppl: float, spread: float = 0.0, seed: int = 0) -> dict:
    """Per-window results whose pooled perplexity is exactly ``ppl``: per-token NLL log(ppl) ± ``spread``."""
    rng = np.random.default_rng(seed)
    dev = rng.uniform(-spread, spread, N_WIN)
    dev -= dev.mean()
    return {"window_nll": list((math.log(ppl) + dev) * TOK), "window_tokens": [TOK] * N_WIN}


def with_windows(table: dict, spread: float = 0.0) -> dict:
    """Per-window samples for every row; windows share a common per-window difficulty (same seed) plus
    variant-specific noise of size ``spread``."""
    base = windows(1.0, 0.5, seed=99)["window_nll"]
    samples = {}
    for i, r in enumerate(table["rows"]):
        own = windows(r["ours"]["wiki2_ppl"], spread, seed=i)["window_nll"]
        samples[r["variant"]] = {"ppl": {"wiki": {"window_nll": [a + b for a, b in zip(own, base)],
                                                  "window_tokens": [TOK] * N_WIN}}, "zeroshot": {}}
    # the common difficulty adds the same amount to every variant: shift the pooled ppl back
    for r in table["rows"]:
        w = samples[r["variant"]]["ppl"]["wiki"]
        r["ours"]["wiki2_ppl"] = math.exp(sum(w["window_nll"]) / (TOK * N_WIN))
    return {**table, **identical_seeds(samples)}


def identical_seeds(samples: dict, n: int = 3) -> dict:
    """Every variant realized ``n`` times with identical results (no realization spread): the verdicts are the
    windows' alone, as when the compression were deterministic. Each seed's entry is the same dict object, so
    edits of ``samples`` reach every seed."""
    real = {v: {"random": not v.endswith("dense"), "seeds": list(range(n)) if not v.endswith("dense") else [None],
                "ids": [v] * n} for v in samples}
    return {"samples": samples, "realizations": real,
            "seed_samples": {v: [samples[v]] * n for v in samples if not v.endswith("dense")}}


def table1(c4=30.0, quip=40.0, c16=35.0, spread=0.0, c4_top=None):
    """7B, 13B and 70B blocks whose CALDERA and QuIP# rows map to the same stand-in variants (as in the mini run)."""
    rows = []
    for pm, tag in (("llama-2-7b", "7B"), ("llama-2-13b", "13B"), ("llama-2-70b", "70B")):
        rows += [row(pm, f"Unquantized ({tag})", 0, None, 10.0, 5.0, "S", variant="dense"),
                 row(pm, f"QuIP# ({tag}, No FT)", 0, None, quip, 8.0, "S", variant="quip"),
                 row(pm, f"CALDERA ({tag})", 128, 4.0, c4, 6.0, "S", variant="c4-r16")]
    rows.append(row("llama-2-7b", "CALDERA (7B)", 256, 4.0, c4_top or c4, 6.0, "S", variant="c4-r32"))
    rows.append(row("llama-2-7b", "CALDERA (7B)", 64, 16.0, c16, 6.0, "S", variant="c16-r8"))
    return with_windows({"rows": rows}, spread)


def seeded(table: dict, factors: dict[str, tuple[float, ...]]) -> dict:
    """``table`` with each listed variant realized once per factor: seed s's windows are seed 0's scaled by
    ``factors[v][s]`` in perplexity (a realization that is better or worse on every window alike)."""
    out = {**table, "realizations": dict(table["realizations"]), "seed_samples": dict(table["seed_samples"])}
    for v, fs in factors.items():
        w = table["samples"][v]["ppl"]["wiki"]
        out["seed_samples"][v] = [{"ppl": {"wiki": {"window_nll": [x + math.log(f) * t for x, t in
                                                                   zip(w["window_nll"], w["window_tokens"])],
                                                    "window_tokens": w["window_tokens"]}}, "zeroshot": {}}
                                  for f in fs]
        out["realizations"][v] = {"random": True, "seeds": list(range(len(fs))), "ids": [v] * len(fs)}
    return out


#: Table 6's 7B rows of :func:`throughput_table`: (paper method, B_LR, variant, paper tokens/s)
TP_ROWS = (("Uncompressed", None, "d", 31.75), ("CALDERA", 16, "c16", 61.68), ("CALDERA", 4, "c4a", 46.29),
           ("CALDERA", 4, "c4b", 46.19), ("QuIP#", None, "q", 87.74))


def throughput_rounds(median: float, noise: float, rounds: int, drift: float, seed: int) -> list[float]:
    """Per-round tokens/s of one variant: ``median`` × the round's machine factor (shared by every variant of the
    table, ×e^(±drift)) × the variant's own noise (×e^(±noise), seeded per variant)."""
    shared = np.random.default_rng(12345).uniform(-drift, drift, rounds)
    own = np.random.default_rng(seed).uniform(-noise, noise, rounds)
    return [float(median * math.exp(g + e)) for g, e in zip(shared, own)]


def throughput_table(speeds: dict[str, tuple[float, float]], decode_speeds: dict | None = None,
                     rounds: int = 10, drift: float = 0.3) -> dict:
    """A Table 6 JSON with the paper's 7B rows (:data:`TP_ROWS`); ``speeds[variant] = (median, noise)``:
    ``rounds`` interleaved rounds (:func:`throughput_rounds`) for the paper's protocol (decode: ``decode_speeds``
    or the same), every variant timed in the same job, a shared machine factor per round of ±``drift`` (in
    log)."""
    from caldera.experiments.planning.throughput_rows import PROTOCOLS

    measured = {}
    for i, (v, ms) in enumerate(sorted(speeds.items())):
        per = {"single_token": ms, "decode": (decode_speeds or speeds)[v]}
        measured[v] = {"model": "S", "method": "dense" if v == "d" else "x",
                       **{p: {"tokens_per_s": throughput_rounds(*per[p], rounds, drift, seed=i)} for p in PROTOCOLS}}
    return {"rows": [{"paper_method": m, "b_lr": b, "variant": v, "paper_model": "llama-2-7b", "paper_tok_per_s": t}
                     for m, b, v, t in TP_ROWS], "measured": measured, "settings": {"rounds": rounds}}


def claim_starting_with(claims, start):
    """The one claim of ``claims`` whose text starts with ``start`` (asserts there is exactly one)."""
    hits = [c for c in claims if c["claim"].startswith(start)]
    assert len(hits) == 1, [c["claim"] for c in hits]
    return hits[0]


def extra_table(extra_ppl):
    """A Table 1 block (stand-in S) with dense, QuIP#, two CALDERA rows and two ``extra_methods`` rows: rtn-3bit
    at Wiki2 perplexity ``extra_ppl`` and 3.00 bits, and a dense one without bits."""
    rows = [row("llama-2-7b", "Unquantized (7B)", 0, None, 10.0, 5.0, "S", variant="dense"),
            row("llama-2-7b", "QuIP# (7B, No FT)", 0, None, 40.0, 8.0, "S", variant="quip"),
            row("llama-2-7b", "CALDERA (7B)", 128, 4.0, 30.0, 6.0, "S", variant="c4-r16"),
            row("llama-2-7b", "CALDERA (7B)", 64, 16.0, 35.0, 6.0, "S", variant="c16-r8"),
            row("—", "rtn-3bit (ours only)", "—", "—", extra_ppl, None, "S", variant="rtn3"),
            row("—", "unquantized (ours only)", "—", "—", 10.0, None, "S", variant="x-dense")]
    bits = {"quip": 2.0, "c4-r16": 2.18, "c16-r8": 2.37, "rtn3": 3.0, "x-dense": None, "dense": None}
    for r in rows:
        r["ours"]["avg_bits"] = bits[r["variant"]]
    return with_windows({"rows": rows})


def one_seed(t: dict, *variants: str) -> dict:
    """``t`` with ``variants`` cut to their seed-0 realization (in place)."""
    for v in variants:
        t["realizations"][v] = {**t["realizations"][v], "seeds": [0], "ids": [v]}
        t["seed_samples"].pop(v, None)
    return t

