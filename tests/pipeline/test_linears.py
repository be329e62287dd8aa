"""caldera.pipeline.linears: the seven linear layers named once, and the names match the models' modules."""

from __future__ import annotations

import pytest

from caldera.pipeline import linears as L


@pytest.mark.parametrize("factory", ["tiny_llama", "tiny_gemma3"])
def test_every_named_path_is_a_linear_of_a_decoder_layer_and_every_linear_is_named(factory):
    import torch

    import tests.helpers as helpers

    layer = getattr(helpers, factory)().model.layers[0]
    linears = {n for n, m in layer.named_modules() if isinstance(m, torch.nn.Linear)}
    assert set(L.LINEARS) == linears
    for hooked, members in L.GROUPS.values():
        assert hooked in members  # the Hessian is collected at the input of one of the layers that read it


def test_short_names_paths_and_groups_agree():
    assert L.SHORT_NAMES == ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert [L.PATH_OF[s] for s in L.SHORT_NAMES] == list(L.LINEARS)
    assert {L.GROUP_OF[s] for s in ("q_proj", "k_proj", "v_proj")} == {"qkv"}
    assert L.GROUP_OF["gate_proj"] == L.GROUP_OF["up_proj"] == "up" and L.GROUP_OF["down_proj"] == "down"
    assert sorted(m for _, ms in L.GROUPS.values() for m in ms) == sorted(L.LINEARS)  # each layer in one group
