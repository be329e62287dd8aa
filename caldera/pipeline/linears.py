"""The seven linear layers of a decoder layer, named once: their paths, short names and Hessian groups.

Torch-free, so that planning and reporting code can name the layers without loading torch.
"""

from __future__ import annotations

#: Hessian group -> (hooked module path inside a decoder layer, linear layers that read it).
GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "qkv": ("self_attn.q_proj", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
    "o": ("self_attn.o_proj", ("self_attn.o_proj",)),
    "up": ("mlp.up_proj", ("mlp.gate_proj", "mlp.up_proj")),
    "down": ("mlp.down_proj", ("mlp.down_proj",)),
}
#: paths inside a decoder layer (``self_attn.q_proj``), in the paper's order q, k, v, o, gate, up, down
LINEARS: tuple[str, ...] = tuple(m for _, members in GROUPS.values() for m in members)
#: short name (``q_proj``) -> path inside a decoder layer (``self_attn.q_proj``)
PATH_OF: dict[str, str] = {m.rsplit(".", 1)[-1]: m for m in LINEARS}
#: short names, in the same order
SHORT_NAMES: tuple[str, ...] = tuple(PATH_OF)
#: short name -> the Hessian group it reads (``qkv``, ``o``, ``up``, ``down``)
GROUP_OF: dict[str, str] = {m.rsplit(".", 1)[-1]: g for g, (_, members) in GROUPS.items() for m in members}
