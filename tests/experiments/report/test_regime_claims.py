"""caldera.experiments.report.regime_claims: the claims decided again on the regime's rows, beside the 2-bit ones."""

from __future__ import annotations

import copy

from caldera.experiments.report.claims import claims_table, write_claims
from caldera.experiments.report.regime_claims import (
    NOT_RUN,
    attach_regime,
    decide_regime,
    match_key,
    regime_cell,
    regime_counts,
    strip_bits,
)
from caldera.experiments.report.table_claims import table_claims
from tests.experiments.report.claim_tables import table1

BEATS = "4-bit CALDERA beats QuIP# in Wiki2 perplexity"
LOWEST = "highest-rank 4-bit CALDERA has the lowest Wiki2 perplexity"
EQUAL_BITS = "4-bit rank-256 CALDERA beats 16-bit"


def regime_of(tab: dict, keep: set[str], suffix: str = "-q3") -> dict:
    """``tab`` as a regime table: the rows of ``keep`` (and the dense rows) under ``<id>-q3``, the others not run."""
    out = copy.deepcopy(tab)
    ren = {v: f"{v}{suffix}" for v in keep}
    for r in out["rows"]:
        v = r["variant"]
        if v == "dense":
            continue
        r["variant"] = ren.get(v)
    for part in ("samples", "realizations", "seed_samples"):
        out[part] = {ren.get(v, v): x for v, x in out[part].items() if v in ren or v == "dense"}
    return out


def _find(claims, text, source_has=""):
    return [c for c in claims if c["claim"].startswith(text) and source_has in c["source"]]


def test_ids_lose_the_regime_suffix_and_keep_their_bits():
    assert strip_bits("smollm2-quipsharp-q3") == ("smollm2-quipsharp", 3)
    assert strip_bits("smollm2-caldera-r16-lr4") == ("smollm2-caldera-r16-lr4", 2)
    assert strip_bits("x-q3-lr4") == ("x-q3-lr4", 2)  # only a trailing suffix


def test_the_regime_decides_the_same_comparison_on_its_own_numbers():
    """At 2 bits CALDERA and QuIP# tie; in the regime CALDERA is 30 % lower on every window: the regime column
    says holds where the 2-bit verdict does not, and names Q 3 bits."""
    two = {"table1_llama2_zeroshot": table1(c4=40.0, quip=40.0, spread=0.05)}
    reg = table1(c4=28.0, quip=40.0, spread=0.05)
    regime = decide_regime({"table1_llama2_zeroshot_regime": regime_of(reg, {"quip", "c4-r16", "c4-r32", "c16-r8"})},
                           {})
    claims = attach_regime(table_claims(two), regime)
    for c in _find(claims, BEATS):
        assert c["verdict"] != "holds" and c["regime"]["verdict"] == "holds", c
        assert c["regime"]["q_bits"] == [3] and "Q 3 bits" in regime_cell(c)
        assert regime_cell(c).startswith("**holds**") and "×0." in regime_cell(c)
    n = regime_counts(claims)
    assert n["differ"] >= 3 and n["regime"]["holds"] >= 3


def test_a_comparison_the_regime_did_not_make_is_not_run_there():
    """A row not compressed again (16-bit rank 64) leaves its claim without a regime verdict, and a ranking over
    fewer rows is not the same claim: both say not run in the regime, never a verdict over other rows."""
    two = {"table1_llama2_zeroshot": table1(spread=0.05)}
    reg = regime_of(table1(spread=0.05), {"quip", "c4-r16", "c4-r32"})  # no c16-r8 at 3 bits
    claims = attach_regime(table_claims(two), decide_regime({"table1_llama2_zeroshot_regime": reg}, {}))
    (equal_bits,) = _find(claims, EQUAL_BITS)
    assert equal_bits["regime"] == {"verdict": NOT_RUN} and regime_cell(equal_bits) == NOT_RUN
    (lowest_7b,) = _find(claims, LOWEST, "llama-2-7b")  # at 2 bits it ranks against c16-r8 too
    assert lowest_7b["regime"]["verdict"] == NOT_RUN
    # a claim whose rows all ran is matched
    (lowest_70b,) = _find(claims, LOWEST, "llama-2-70b")  # against QuIP# alone: its rows all ran at 3 bits
    assert lowest_70b["regime"]["verdict"] == "holds" and lowest_70b["regime"]["q_bits"] == [3]


def test_a_table_whose_stand_in_regime_is_2_bits_gives_its_own_verdicts():
    tab = table1(c4=30.0, quip=40.0, spread=0.05)
    two = table_claims({"table1_llama2_zeroshot": tab})
    claims = attach_regime(copy.deepcopy(two), decide_regime({}, {"table1_llama2_zeroshot": tab}))
    for before, c in zip(two, claims):
        assert c["regime"]["verdict"] == before["verdict"]
        if c["regime"].get("q_bits"):
            assert c["regime"]["q_bits"] == [2] and "same as 2 bits" in regime_cell(c)


def test_match_keys_tell_apart_claims_that_differ_only_in_their_pairs():
    a = {"claim": "x", "source": "s", "intervals": [{"pair": ["m-a", "m-b"]}]}
    b = {"claim": "x", "source": "s", "intervals": [{"pair": ["m-a-q3", "m-b-q3"]}]}
    c = {"claim": "x", "source": "s", "intervals": [{"pair": ["m-a-q3", "m-c-q3"]}]}
    assert match_key(a) == match_key(b) != match_key(c)


def test_claims_md_gets_a_regime_column_and_the_counts(tmp_path):
    import json

    fig = tmp_path / "fig.json"
    fig.write_text(json.dumps({"curves": []}))
    t2 = tmp_path / "table1_llama2_zeroshot.json"
    t2.write_text(json.dumps(table1(c4=40.0, quip=40.0, spread=0.05)))
    tr = tmp_path / "table1_llama2_zeroshot_regime.json"
    tr.write_text(json.dumps(regime_of(table1(c4=28.0, quip=40.0, spread=0.05), {"quip", "c4-r16", "c4-r32"})))
    md, js = tmp_path / "claims.md", tmp_path / "claims.json"
    claims = write_claims(str(fig), str(fig), [str(t2)], str(md), str(js), regime_table_jsons=[str(tr)])
    text = md.read_text()
    assert "| claim | source | verdict | in the stand-in's regime |" in text
    assert "**In the stand-in's regime**" in text and "differ" in text
    assert all("regime" in c for c in json.loads(js.read_text()))
    # without regime tables: the table as before, no regime column
    plain = claims_table([{k: v for k, v in c.items() if k != "regime"} for c in claims])
    assert "in the stand-in's regime" not in plain[0]


def test_a_claim_that_is_not_on_the_tables_rows_is_not_decided_again():
    """Figure, throughput and fine-tuning claims are not decided on the regime's rows: "—", never "not run"."""
    fig = {"claim": "no-RHT worse for some matrices", "source": "App. G.1 / Fig. 3", "verdict": "holds",
           "numbers": "n", "sdd": "—", "intervals": []}
    (c,) = attach_regime([fig], [dict(fig, verdict="fails")])
    assert c["regime"] == {"verdict": "—"} and regime_cell(c) == "—"
    assert regime_counts([c])["decided_in_both"] == 0


def test_compare_names_a_changed_regime_verdict(tmp_path):
    """`caldera compare` matches each claim's regime verdict as a claim of its own: a run whose regime verdict
    moved is flagged even where its 2-bit verdict did not."""
    import json

    from caldera.experiments.report.compare import compare_folders
    from caldera.experiments.report.regime_claims import IN_REGIME, with_regime_claims

    base = {"claim": BEATS, "source": "t [m]", "verdict": "inconclusive", "numbers": "n", "sdd": "s",
            "intervals": [], "regime": {"verdict": "holds", "numbers": "r", "sdd": "s", "intervals": [],
                                        "q_bits": [3]}}
    moved = {**base, "regime": {**base["regime"], "verdict": "inconclusive"}}
    not_run = {**base, "claim": "other", "regime": {"verdict": NOT_RUN}}
    assert [c["source"] for c in with_regime_claims([base, not_run])] == ["t [m]", "t [m]", "t [m]" + IN_REGIME]
    for name, claims in (("run", [moved, not_run]), ("ref", [base, not_run])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "claims.json").write_text(json.dumps(claims))
    res = compare_folders(tmp_path / "run", tmp_path / "ref")
    assert [(v["source"], v["committed"], v["rerun"]) for v in res["claims"]["changed"]] == [
        ("t [m]" + IN_REGIME, "holds", "inconclusive")]


def test_a_regime_verdict_that_decides_nothing_is_shown_as_it_is_not_as_not_run():
    from caldera.experiments.report.verdicts import NEEDS_SEEDS

    fam = {"claim": "LLaMa-3 degrades more than LLaMa-2 under compression (second model family)",
           "source": "§5.1, Tables 1–2", "verdict": "inconclusive", "numbers": "n", "sdd": "s", "intervals": []}
    (c,) = attach_regime([dict(fam)], [dict(fam, verdict=NEEDS_SEEDS, numbers="r")])
    assert c["regime"]["verdict"] == NEEDS_SEEDS and regime_cell(c) == NEEDS_SEEDS
    assert regime_counts([c])["decided_in_both"] == 0
