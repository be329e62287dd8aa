"""caldera.pipeline.checkpoint.card: the model card states what the config records (base model, method, bits,
calibration, caldera version, commit), how to load it and that caldera is needed; ``unknown`` for what it lacks."""

from __future__ import annotations

from caldera.pipeline.checkpoint.card import card_facts, model_card

PROV = {"base_model": {"name": "HuggingFaceTB/SmolLM2-135M", "weights_sha256": "ab" * 32},
        "calibration": {"source": "wikitext2", "n_tokens": 4096, "n_sequences": 16, "seq_len": 256, "seed": 0,
                        "calibration_sha256": "cd" * 32, "hessians_sha256": "ef" * 32},
        "caldera_version": "0.1.0", "git_commit": "0123456789abcdef0123456789abcdef01234567"}
CONFIG = {"method": "caldera", "method_config": {"rank": 64, "l_bits": 4}, "provenance": PROV,
          "bits": {"average_bits": 2.4, "storage_bits_per_weight": 2.5, "b_q": 2, "b_lr": 4, "rank": 64},
          "dense_layers": []}


def test_the_card_states_the_provenance_and_how_to_load():
    card = model_card(CONFIG)
    assert card.startswith("---\nlibrary_name: transformers\n")
    assert "base_model: HuggingFaceTB/SmolLM2-135M\n" in card  # a hub id links the base model on the hub
    for text in ("HuggingFaceTB/SmolLM2-135M", "ab" * 32, "caldera (l_bits=4, rank=64)", "2.400", "2.500",
                 "b_q 2, b_lr 4, rank 64", "4096 tokens of wikitext2", "16 sequences of 256", "cd" * 32, "ef" * 32,
                 "caldera version**: 0.1.0", PROV["git_commit"], "pip install caldera",
                 "AutoModelForCausalLM.from_pretrained", "load_compressed", "caldera export"):
        assert text in card, text
    assert model_card(CONFIG) == card  # a pure function: the same config, the same bytes


def test_what_the_config_does_not_record_is_unknown():
    """A config without provenance or bits (written before they were recorded): ``unknown`` and ``not
    recorded``, no base_model link; an asset name or a folder is no hub id either."""
    facts = dict(card_facts({"method": "quip#", "method_config": {}}))
    assert facts["base model"] == "unknown (weights sha256 unknown)"
    assert (facts["calibration"], facts["caldera version"], facts["git commit"]) == ("unknown",) * 3
    assert facts["bits per weight"] == "not recorded" and facts["method"] == "quip#"
    assert "base_model:" not in model_card({"method": "quip#"})
    for name in ("smollm2", "./models/tiny", "/abs/path"):
        card = model_card({**CONFIG, "provenance": {**PROV, "base_model": {"name": name}}})
        assert "base_model:" not in card and name in card
