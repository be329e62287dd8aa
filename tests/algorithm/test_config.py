import json

import pytest

from caldera.algorithm.config import PRESETS, CalderaConfig


def test_json_round_trip_all_presets():
    for name in PRESETS:
        c = CalderaConfig.preset(name, rank=32)
        assert CalderaConfig.from_json(c.to_json()) == c
        assert c.rank == 32


def test_paper_and_authors_presets():
    p = CalderaConfig.preset("paper")
    assert (p.outer_iters, p.inner_iters, p.update_order, p.rht, p.hessian_update) == (15, 10, "Q-first", True, True)
    a = CalderaConfig.preset("authors-2025")
    assert (a.outer_iters, a.inner_iters, a.update_order, a.ldlq_refine_passes) == (20, 50, "LR-first", 10)
    assert CalderaConfig.preset("4bit-no-rht").rht is False
    assert CalderaConfig.preset("4bit-no-ldlq").ldlq is False
    assert CalderaConfig.preset("16bit-factors").factors_quantized is False


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"rank": 0}, "rank"),
        ({"q_bits": 5}, "q_bits"),
        ({"l_bits": 8}, "l_bits"),
        ({"l_bits": 16, "r_bits": 4}, "both 16"),
        ({"update_order": "random"}, "update_order"),
        ({"outer_iters": 0}, "outer_iters"),
        ({"sigma_reg": -1.0}, "sigma_reg"),
        ({"rht": "yes"}, "rht"),
    ],
)
def test_validation_names_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        CalderaConfig(**kw)


def test_unknown_keys_and_presets_rejected():
    with pytest.raises(ValueError, match="unknown keys"):
        CalderaConfig.from_dict({**CalderaConfig().to_dict(), "foo": 1})
    with pytest.raises(ValueError, match="preset"):
        CalderaConfig.preset("nope")
    assert json.loads(CalderaConfig().to_json())["version"] == 1
