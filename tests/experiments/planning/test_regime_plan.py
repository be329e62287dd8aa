"""The regime's plan (caldera.experiments.planning.regime_plan): the paper's 2-bit QuIP# targets read from its tables,
and the config checks of the ``regime`` block that need the rest of the config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from caldera.experiments.planning import regime_plan as P
from caldera.experiments.planning.plan import check_config

ROOT = Path(__file__).resolve().parents[3]


def mini() -> dict:
    return yaml.safe_load((ROOT / "config/mini.yaml").read_text())


@pytest.mark.parametrize("model, corpus, quip, dense", [
    ("llama-2-7b", "wiki2", 8.23, 5.12),   # Table 1
    ("llama-2-13b", "wiki2", 6.06, 4.57),
    ("llama-2-70b", "wiki2", 4.16, 3.12),
    ("llama-3-8b", "wiki2", 13.8, 5.54),   # Table 2
    ("llama-2-7b", "c4", 10.8, 6.63),
])
def test_paper_target_is_the_2_bit_quip_row_over_the_unquantized_row(model, corpus, quip, dense):
    t = P.paper_target(model, corpus)
    assert (t["quip_ppl"], t["dense_ppl"]) == (quip, dense)
    assert t["ratio"] == pytest.approx(quip / dense) and t["paper_model"] == model and t["corpus"] == corpus


def test_the_llama_2_7b_target_is_the_ratio_the_issue_names():
    assert round(P.paper_target("llama-2-7b")["ratio"], 2) == 1.61


def test_a_paper_model_without_an_unquantized_row_has_no_target():
    with pytest.raises(ValueError, match="mistral-7b.*table7_mistral prints no unquantized"):
        P.paper_target("mistral-7b")
    assert "mistral-7b" not in P.targets_available()
    assert {"llama-2-7b", "llama-3-8b"} <= set(P.targets_available())
    with pytest.raises(ValueError, match="in none of the tables"):
        P.paper_target("gpt-2")


def test_the_default_config_has_a_valid_regime_and_its_plan():
    cfg = mini()
    assert P.regime_errors(cfg) == []
    check_config(cfg)
    plan = P.RegimePlan.from_config(cfg)
    assert set(plan.targets) == {"smollm2", "gemma3"}
    assert plan.targets["smollm2"]["paper_model"] == "llama-2-7b"
    assert plan.targets["gemma3"]["paper_model"] == "llama-3-8b"
    assert plan.reconstructed is True and plan.quip_params == {}
    assert set(plan.run.models) == {"smollm2", "gemma3"}
    assert P.regime_errors({**cfg, "regime": None}) == []


@pytest.mark.parametrize("edit, words", [
    (lambda r: r["models"]["gemma3"].update(paper_model="llama-2-7b"),
     "regime.models.gemma3.paper_model: 'llama-2-7b' is not a paper model 'gemma3' stands in for"),
    (lambda r: r["models"]["smollm2"].update(paper_model="mistral-7b"),
     "regime.models.smollm2.paper_model: paper model 'mistral-7b': table7_mistral prints no unquantized"),
    (lambda r: r["models"].update(tinyllama={"paper_model": "llama-2-7b"}),
     "regime.models.tinyllama: 'tinyllama' is not a key of models"),
])
def test_a_regime_the_rest_of_the_config_contradicts_is_refused_naming_the_key(edit, words):
    cfg = mini()
    edit(cfg["regime"])
    assert any(words in e for e in P.regime_errors(cfg)), P.regime_errors(cfg)
    with pytest.raises(ValueError, match=words.split(":")[0].replace(".", r"\.")):
        check_config(cfg)
    with pytest.raises(ValueError, match=words.split(":")[0].replace(".", r"\.")):
        P.RegimePlan.from_config(cfg)


def test_the_plan_refuses_quip_params_the_candidates_set_and_a_config_without_the_block():
    cfg = mini()
    cfg["methods"]["quip#"]["params"] = {"q_bits": 3}
    with pytest.raises(ValueError, match=r"methods\.quip#\.params: \['q_bits'\] are set per candidate"):
        P.RegimePlan.from_config(cfg)
    del cfg["regime"]
    with pytest.raises(ValueError, match="regime: the config has no regime block"):
        P.RegimePlan.from_config(cfg)
