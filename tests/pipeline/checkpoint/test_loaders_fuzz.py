"""Fuzzing a tiny checkpoint against both loaders (Hypothesis): a field of ``caldera_config.json`` set to a value
drawn from JSON's types and edges (or deleted), a stored tensor cast, cut, edited or added, or a byte of
``model.safetensors`` flipped, each resealed the way the writer seals a checkpoint (fingerprints, content manifest,
``config.json`` and checksums recomputed from the mutated content) so that only the deeper checks can catch it.
Invariant: ``load_compressed`` and ``from_pretrained`` both refuse it with the same clear error, or both load it
and give the same logits. ``CALDERA_FUZZ_EXAMPLES`` raises the number of cases (CI runs the default)."""

from __future__ import annotations

import json
import os
import shutil
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from caldera.pipeline.checkpoint import MODEL_FILE, load_compressed
from tests.pipeline.checkpoint.test_verify import reseal_as_writer
from tests.pipeline.checkpoint_helpers import IDS, copy_checkpoint, edit_config, rechecksum, reseal

_Q = "model.layers.0.self_attn.q_proj"
MODULE_FIELDS = ["version", "in_features", "out_features", "q_quantizer", "rht", "rank", "ft_rank", "lr_format",
                 "q_codes_dtype", "lr_codes_dtype", "r_codes_dtype", "signs_trainable", "bias", "ft_dtype", "method"]
BASE_FIELDS = ["hidden_size", "vocab_size", "tie_word_embeddings", "num_hidden_layers", "max_position_embeddings",
               "model_type", "rms_norm_eps", "num_attention_heads", "intermediate_size", "dtype"]
TOP_FIELDS = ["format_version", "method", "tied", "bits", "dense_layers", "ft_rank", "errors", "fingerprints",
              "method_config", "modules"]
JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.sampled_from([0, 1, -1, 2, 3, 4, 8, 16, 63, 64, 65, 2**31, 2**63, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(
        ["", "e8p", "e8p-rvq4", "e8p-rvq3", "uniform-4", "identity", "int64", "int8", "uint8", "float16",
         "float32", "bfloat16", "quantized", "llama", "gemma3_text", "quip#", "model.norm.weight",
         "model.embed_tokens.weight"]),
    st.lists(st.integers(-2, 70), max_size=3), st.dictionaries(st.sampled_from(["lm_head.weight", "a"]),
                                                                 st.sampled_from(["model.norm.weight",
                                                                                  "model.embed_tokens.weight"]),
                                                                 max_size=2))
DELETE = object()


def _examples(n: int) -> int:
    return int(os.environ.get("CALDERA_FUZZ_EXAMPLES", n))


@pytest.fixture(scope="module")
def base(saved, tmp_path_factory):
    """The tied checkpoint with ``dtype`` in its base config (transformers reads no tensor file before the caldera
    quantizer then), and its logits."""
    _, path = saved
    ck = copy_checkpoint(path, tmp_path_factory.mktemp("fuzz") / "ck")
    edit_config(lambda c: c["base_config"].update(dtype="float32"))(ck)
    reseal(ck)
    return ck


def _set_json(where, key, value):
    def f(c):
        node = {"top": c, "module": c["modules"][_Q], "base": c["base_config"]}[where]
        if value is DELETE:
            node.pop(key, None)
        else:
            node[key] = value

    return edit_config(f)


def _tensor_op(name, op, arg):
    def go(ck):
        t = load_file(str(ck / MODEL_FILE))
        if name not in t:
            return
        v = t[name]
        if op == "cast":
            t[name] = v.to(arg)
        elif op == "cut":
            t[name] = v.reshape(-1)[: max(0, v.numel() - arg)].contiguous()
        elif op == "set":
            v = v.clone()
            value = arg
            if not v.is_floating_point():  # an integer tensor takes the value clamped into its dtype's range
                info = torch.iinfo(v.dtype)
                value = min(max(int(arg) if abs(arg) < 2**62 else info.max, info.min), info.max)
            v.view(-1)[0] = value
            t[name] = v
        elif op == "drop":
            t.pop(name)
        elif op == "alias":
            t[arg] = v.clone()
        save_file(t, str(ck / MODEL_FILE), metadata={"format": "pt"})

    return go


def _flip(offset):
    def go(ck):
        b = bytearray((ck / MODEL_FILE).read_bytes())
        b[offset % len(b)] ^= 0xFF
        (ck / MODEL_FILE).write_bytes(bytes(b))

    return go


def _tensor_names(ck):
    from safetensors import safe_open

    with safe_open(str(ck / MODEL_FILE), "pt") as f:
        return sorted(f.keys())


MUTATION = st.one_of(
    st.tuples(st.just("json"), st.sampled_from(["module"]), st.sampled_from(MODULE_FIELDS),
              st.one_of(JSON_VALUES, st.just(DELETE))),
    st.tuples(st.just("json"), st.sampled_from(["base"]), st.sampled_from(BASE_FIELDS),
              st.one_of(JSON_VALUES, st.just(DELETE))),
    st.tuples(st.just("json"), st.sampled_from(["top"]), st.sampled_from(TOP_FIELDS),
              st.one_of(JSON_VALUES, st.just(DELETE))),
    st.tuples(st.just("tensor"), st.integers(0, 200), st.sampled_from(["cast", "cut", "set", "drop", "alias"]),
              st.one_of(st.sampled_from([torch.int64, torch.int32, torch.int8, torch.uint8, torch.float16,
                                         torch.bfloat16, torch.float32]),
                        st.sampled_from([1, 8, 64]), st.sampled_from([0.0, -1.0, 2.0, 1e30, 65536.0, -3.0]),
                        st.sampled_from(["lm_head.weight", "model.extra", _Q + ".extra"]))),
    st.tuples(st.just("bytes"), st.integers(0, 2**40), st.just(None), st.just(None)),
)


def _outcome(load):
    """``("ok", logits)`` or ``("refused", type name, message)``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = load()
        with torch.no_grad():
            return ("ok", model(torch.tensor(IDS)).logits)
    except Exception as e:  # noqa: BLE001 - the invariant is about which exceptions escape
        return ("refused", type(e).__name__, str(e))


CASES: list = []


@settings(max_examples=_examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mutation=MUTATION)
def test_both_loaders_refuse_a_mutated_checkpoint_alike_or_give_the_same_logits(base, tmp_path, mutation):
    from transformers import AutoModelForCausalLM

    kind, a, b, c = mutation
    ck = tmp_path / "ck"
    shutil.rmtree(ck, ignore_errors=True)
    copy_checkpoint(base, ck)
    if kind == "json":
        _set_json(a, b, c)(ck)
    elif kind == "tensor":
        names = _tensor_names(ck)
        if b == "alias" and not isinstance(c, str) or b == "cast" and not isinstance(c, torch.dtype) or \
                b == "cut" and not isinstance(c, int) or b == "set" and not isinstance(c, (int, float)):
            c = {"alias": "lm_head.weight", "cast": torch.int64, "cut": 1, "set": -1.0}[b]
        _tensor_op(names[a % len(names)], b, c)(ck)
    else:
        _flip(a)(ck)
    try:
        reseal_as_writer(ck)
    except Exception:  # noqa: BLE001 - the writer's seal needs a readable file and config: checksums only
        rechecksum(ck)
    CASES.append(mutation)
    first = _outcome(lambda: load_compressed(ck, load_tokenizer=False)[0])
    second = _outcome(lambda: AutoModelForCausalLM.from_pretrained(str(ck)))
    if first[0] == "ok" or second[0] == "ok":
        assert first[0] == second[0] == "ok", (mutation, first[:3], second[:3])
        assert torch.allclose(first[1], second[1], rtol=0, atol=0, equal_nan=True), mutation  # bit for bit
        return
    assert first[1] == "ValueError", (mutation, first)
    if kind == "json" and a == "base":
        # config.json (the base config, resealed to match) is parsed by transformers' own config classes before the
        # caldera quantizer has the folder: refused with their error (a model_type [] is their TypeError, a dtype
        # "" their AttributeError), which is not this package's to word
        return
    assert second[1] == "ValueError" and second[2] == first[2], (mutation, first, second)


def test_the_fuzz_ran_its_cases():
    """How many cases the fuzz above tried (CI: the default max_examples)."""
    assert len(CASES) >= min(_examples(60), 1)
    print(f"checkpoint fuzz: {len(CASES)} cases; {sum(1 for m in CASES if m[0] == 'json')} JSON fields, "
          f"{sum(1 for m in CASES if m[0] == 'tensor')} tensors, {sum(1 for m in CASES if m[0] == 'bytes')} bytes")
    json.dumps([str(m) for m in CASES])
