"""The claims in both regimes: every claim of the 2-bit run beside the same claim in the stand-ins' own regime, and
whether the two verdicts agree.

A stand-in's regime is the Q bits at which its QuIP# loses, on held-out calibration text, what the paper's QuIP#
loses at 2 bits (``regime.json``, :mod:`caldera.experiments.report.regime_report`). Where that is 2 bits the 2-bit
run is the regime's run and the verdict is the same by construction; where it is not, the regime run
(``config/mini-regime.yaml``: the same rows with Q at the regime's bits) decides the claim again. Claims are matched
by source and claim text, with what a run's numbers add to the text left out (the parts in parentheses or brackets:
bits, labels). Pure functions of the two runs' ``claims.json`` and the regime record; :func:`main` writes
``regime_agreement.md`` and ``regime_agreement.json``::

    python -m caldera.experiments.report.regime_agreement --two-bit paper_tables/generated --regime paper_tables/regime
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: the verdicts counted per regime, in the order the page lists them
VERDICTS = ("holds", "fails", "inconclusive")
#: the regime column of a claim that neither run decides in the regime
NOT_RUN = "not run in the regime"
#: the regime column of a claim on the App. G.1 ablation presets, whose Q is 2 bits in every run
FIXED_Q = "Q fixed at 2 bits (App. G.1 presets)"


def fixed_q_keys() -> set[tuple[str, str]]:
    """:func:`claim_key` of every registry claim decided on the Figure 3 / 4 ablation presets (Q at 2 bits
    whatever a run's ``q_bits``): a regime run decides them exactly as the 2-bit run does."""
    from caldera.experiments.report.claim_registry import CONVERGENCE, FIGURE3, FIGURE4, REGISTRY

    return {claim_key({"source": e.source, "claim": e.claim}) for e in REGISTRY
            if e.kind in (FIGURE3, CONVERGENCE, FIGURE4)}


def claim_key(claim: Mapping[str, Any]) -> tuple[str, str]:
    """``(source, claim)``, each without its first parenthesised part and what follows: what a run's own numbers
    and labels add (``"(2.18 vs 2.00 bits: ...)"``, the ``"(Q4_1-dequantized, fp32)"`` of a model label). Bracketed
    parts stay: a source's paper model (``"[llama-2-13b]"``) and a claim's stand-in (``"[SmolLM2-135M"``) tell
    claims apart."""
    def cut(text: str) -> str:
        return re.split(r"\s\(", str(text), maxsplit=1)[0].strip()

    return cut(claim["source"]), cut(claim["claim"])


def stand_ins(claim: Mapping[str, Any], models: Sequence[str]) -> set[str]:
    """The stand-ins (of ``models``) a claim's intervals compare: the model prefix of every variant id in their
    pairs. Empty when the claim has no interval naming a variant."""
    found = set()
    for iv in claim.get("intervals") or []:
        for vid in iv.get("pair") or []:
            found |= {m for m in models if str(vid) == m or str(vid).startswith(f"{m}-")}
    return found


def agreement(two_bit: Sequence[Mapping[str, Any]], regime: Sequence[Mapping[str, Any]],
              regime_bits: Mapping[str, int]) -> dict[str, Any]:
    """Every 2-bit claim beside its regime verdict. ``regime_bits``: stand-in → its regime's Q bits. A claim found
    in the regime run (:func:`claim_key`) takes that verdict when the regime run decided it (holds, fails or
    inconclusive; otherwise :data:`NOT_RUN`); one whose stand-ins all have a 2-bit regime keeps its
    own (the same run); a claim on the App. G.1 presets is :data:`FIXED_Q`; any other is :data:`NOT_RUN`.
    Returns ``{"rows": [{"source", "claim", "two_bit",
    "regime", "bits", "agree"}], "differ": the rows whose verdicts differ, "counts": {"2 bits", "regime"}: verdict →
    count, "regime_only": regime claims no 2-bit claim matches}``; ``agree`` is None for :data:`NOT_RUN` and
    :data:`FIXED_Q`."""
    by_key: dict[tuple[str, str], Mapping[str, Any]] = {}
    for c in regime:
        k = claim_key(c)
        if k in by_key:
            raise ValueError(f"two regime claims share the key {k}; claim texts must differ before their numbers")
        by_key[k] = c
    models = sorted(regime_bits)
    fixed = fixed_q_keys()
    rows, used = [], set(fixed)
    for c in two_bit:
        k = claim_key(c)
        involved = stand_ins(c, models)
        if k in fixed:
            rows.append({"source": c["source"], "claim": c["claim"], "two_bit": c["verdict"], "regime": FIXED_Q,
                         "bits": [], "agree": None})
        elif k in by_key and by_key[k]["verdict"] not in VERDICTS:  # the regime run did not decide it
            used.add(k)
            rows.append({"source": c["source"], "claim": c["claim"], "two_bit": c["verdict"], "regime": NOT_RUN,
                         "bits": [], "agree": None})
        elif k in by_key:
            used.add(k)
            other = by_key[k]
            bits = sorted({int(regime_bits[m]) for m in stand_ins(other, models) or involved} or
                          {int(b) for b in regime_bits.values() if int(b) != 2})
            rows.append({"source": c["source"], "claim": c["claim"], "two_bit": c["verdict"],
                         "regime": other["verdict"], "bits": bits, "agree": other["verdict"] == c["verdict"]})
        elif involved and all(int(regime_bits[m]) == 2 for m in involved):
            rows.append({"source": c["source"], "claim": c["claim"], "two_bit": c["verdict"],
                         "regime": c["verdict"], "bits": [2], "agree": True})
        else:
            rows.append({"source": c["source"], "claim": c["claim"], "two_bit": c["verdict"], "regime": NOT_RUN,
                         "bits": [], "agree": None})
    counts = {"2 bits": _count(r["two_bit"] for r in rows),
              "regime": _count(r["regime"] for r in rows if r["regime"] not in (NOT_RUN, FIXED_Q))}
    only = [{"source": c["source"], "claim": c["claim"], "verdict": c["verdict"]} for c in regime
            if claim_key(c) not in used]
    return {"rows": rows, "differ": [r for r in rows if r["agree"] is False], "counts": counts, "regime_only": only}


def _count(verdicts) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in verdicts:
        out[v] = out.get(v, 0) + 1
    return {v: out[v] for v in [*VERDICTS, *sorted(set(out) - set(VERDICTS))] if v in out}


def _bits_text(bits: Sequence[int]) -> str:
    return "—" if not bits else " / ".join(f"{b} bits" for b in bits)


def _counts_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {v}" for v, n in counts.items()) or "none"


def to_markdown(res: Mapping[str, Any], regime_bits: Mapping[str, int], sources: Mapping[str, str]) -> str:
    """``regime_agreement.md``: the regimes, the counts per regime, the claims whose verdicts differ, then every
    claim. ``sources``: ``{"two_bit", "regime"}`` → the folders the claims came from."""
    bits = ", ".join(f"{m} {b} bits" for m, b in sorted(regime_bits.items()))
    lines = ["# The claims in both regimes", "",
             f"Each stand-in's regime (`regime.md`, chosen on held-out calibration text): {bits}. The 2-bit verdicts "
             f"are `{sources['two_bit']}/claims.md`; a stand-in whose regime is 2 bits keeps them (the same run); "
             f"the others' are decided again by `{sources['regime']}/claims.md` (the same rows with Q at the "
             "regime's bits).", "",
             f"- 2 bits: {_counts_text(res['counts']['2 bits'])}.",
             f"- Regime: {_counts_text(res['counts']['regime'])}"
             f" ({sum(r['regime'] == NOT_RUN for r in res['rows'])} {NOT_RUN}, "
             f"{sum(r['regime'] == FIXED_Q for r in res['rows'])} with Q fixed at 2 bits by the App. G.1 presets).", "",
             "## Verdicts that differ between the regimes", ""]
    if res["differ"]:
        lines += ["| claim | source | 2 bits | regime | bits |", "|---|---|---|---|---|"]
        lines += [f"| {r['claim']} | {r['source']} | {r['two_bit']} | {r['regime']} | {_bits_text(r['bits'])} |"
                  for r in res["differ"]]
    else:
        lines.append("None: every claim decided in both regimes has the same verdict in each.")
    lines += ["", "## Every claim", "", "| claim | source | 2 bits | regime | bits | agree |",
              "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        agree = "—" if r["agree"] is None else ("yes" if r["agree"] else "**no**")
        lines.append(f"| {r['claim']} | {r['source']} | {r['two_bit']} | {r['regime']} | {_bits_text(r['bits'])} | "
                     f"{agree} |")
    if res["regime_only"]:
        lines += ["", "## Claims of the regime run alone", "", "| claim | source | verdict |", "|---|---|---|"]
        lines += [f"| {c['claim']} | {c['source']} | {c['verdict']} |" for c in res["regime_only"]]
    return "\n".join(lines) + "\n"


def write_agreement(two_bit_dir: str | Path, regime_dir: str | Path, out_dir: str | Path | None = None) -> dict:
    """Read ``<two_bit_dir>/claims.json``, ``<two_bit_dir>/regime.json`` and ``<regime_dir>/claims.json``; write
    ``regime_agreement.md`` / ``.json`` into ``out_dir`` (default ``regime_dir``). Returns the result."""
    from caldera.atomic import write_atomic, write_json

    two_bit_dir, regime_dir = Path(two_bit_dir), Path(regime_dir)
    out = Path(out_dir) if out_dir is not None else regime_dir
    for path in (two_bit_dir / "claims.json", two_bit_dir / "regime.json", regime_dir / "claims.json"):
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: run the workflow for that folder first (its claims) or the "
                                    "regime measurement (python -m caldera.experiments.jobs.regime)")
    regime_bits = {m: int(sel["q_bits"]) for m, sel in
                   json.loads((two_bit_dir / "regime.json").read_text())["models"].items()}
    res = agreement(json.loads((two_bit_dir / "claims.json").read_text()),
                    json.loads((regime_dir / "claims.json").read_text()), regime_bits)
    res = {"regime_bits": regime_bits, "two_bit": str(two_bit_dir), "regime": str(regime_dir), **res}
    write_json(str(out / "regime_agreement.json"), res)
    write_atomic(str(out / "regime_agreement.md"),
                 to_markdown(res, regime_bits, {"two_bit": str(two_bit_dir), "regime": str(regime_dir)}))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caldera.experiments.report.regime_agreement",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--two-bit", default="paper_tables/generated",
                    help="the 2-bit run's tables folder (its claims.json and regime.json)")
    ap.add_argument("--regime", default="paper_tables/regime", help="the regime run's tables folder (claims.json)")
    ap.add_argument("--out", help="where regime_agreement.md/.json go (default: --regime)")
    a = ap.parse_args(argv)
    res = write_agreement(a.two_bit, a.regime, a.out)
    print(f"{len(res['rows'])} claims; {len(res['differ'])} differ between the regimes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
