"""caldera.pipeline.linears: the seven linear layers named once, and the names match the models' modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from caldera.pipeline import linears as L
from caldera.strict_yaml import load_yaml_strict

SCHEMA = Path(__file__).resolve().parents[2] / "workflow/schemas/config.schema.yaml"
#: where the workflow config schema lists the layer names (each an ``enum`` of short names)
SCHEMA_LAYER_ENUMS = (
    ("properties", "selection", "properties", "matrices", "items", "enum"),
    ("properties", "selection", "properties", "long_iters", "properties", "matrices", "items", "enum"),
    ("$defs", "linears", "items", "enum"),
)


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


def _layer_name_enums(node, path=()):
    """(path, enum) of every ``enum`` in the schema that holds a layer name (a ``*_proj`` entry)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "enum" and isinstance(v, list) and any(str(x).endswith("_proj") for x in v):
                yield (*path, k), v
            else:
                yield from _layer_name_enums(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _layer_name_enums(v, (*path, i))


def test_the_config_schema_lists_exactly_the_named_layers():
    """Every enum of layer names in the workflow config schema is :data:`SHORT_NAMES`, in the same order: a layer
    added to or removed from one of them and not the other fails here."""
    schema = load_yaml_strict(SCHEMA)
    found = dict(_layer_name_enums(schema))
    assert set(SCHEMA_LAYER_ENUMS) <= set(found)  # the known places still exist and still hold layer names
    for path, enum in found.items():
        assert enum == list(L.SHORT_NAMES), path
