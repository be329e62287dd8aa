"""Compression jobs read only their layers' weights (caldera.pipeline.partial), in the stored dtype, and compress
them bitwise as a whole-model float32 load did."""

from __future__ import annotations

import json

import pytest
import torch

from caldera.experiments.planning.settings import RunContext
from caldera.pipeline import compress as C
from caldera.pipeline import partial as P
from caldera.pipeline.hessians import collect_hessians
from tests.helpers import model_entry, tiny_llama

CALDERA = {"rank": 4, "outer_iters": 2, "inner_iters": 2}
LAYER = 2


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A 4-layer random LLaMA saved sharded (hub layout: index.json + many shards) and as one file, with the
    Hessians of its layers."""
    root = tmp_path_factory.mktemp("partial")
    model = tiny_llama(0, num_hidden_layers=4, tie_word_embeddings=False)
    model.save_pretrained(root / "sharded", max_shard_size="40KB")
    model.save_pretrained(root / "single")
    ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(0))
    collect_hessians(model, ids, root / "hess", progress=False, model_name="m")  # the run's name for the model
    return model, root


class Spy:
    """Wraps safetensors.safe_open: records every file opened and every tensor read."""

    def __init__(self, real):
        self.real, self.files, self.keys = real, [], []

    def __call__(self, path, *args, **kwargs):
        spy = self
        self.files.append(str(path).rsplit("/", 1)[-1])

        class Handle:
            def __enter__(self):
                self.f = spy.real(path, *args, **kwargs).__enter__()
                return self

            def __exit__(self, *exc):
                return self.f.__exit__(*exc)

            def keys(self):
                return self.f.keys()

            def get_tensor(self, key):
                spy.keys.append(key)
                return self.f.get_tensor(key)

        return Handle()


def _layer_keys(layer):
    return sorted(f"model.layers.{layer}.{name}.weight" for name in C.LINEARS)


def test_index_has_many_shards(saved):
    _, root = saved
    wmap = json.loads((root / "sharded" / P.INDEX_FILE).read_text())["weight_map"]
    assert len(set(wmap.values())) >= 6  # the layer's 7 matrices are spread over several shards


@pytest.mark.parametrize("layout", ["sharded", "single"])
def test_job_reads_only_its_layers_tensors_and_shards(saved, monkeypatch, layout):
    import safetensors

    _, root = saved
    spy = Spy(safetensors.safe_open)
    monkeypatch.setattr(safetensors, "safe_open", spy)
    model, stats = P.load_layer_weights(root / layout, [LAYER])
    assert sorted(spy.keys) == _layer_keys(LAYER) == sorted(stats["keys"])
    if layout == "sharded":
        wmap = json.loads((root / "sharded" / P.INDEX_FILE).read_text())["weight_map"]
        need = {wmap[k] for k in _layer_keys(LAYER)}
        assert set(spy.files) == need and len(spy.files) == len(need)  # each needed shard opened once, no other
    # every other tensor is on meta (no memory): only the layer's seven weights are real
    real = sorted(n for n, p in model.named_parameters() if p.device.type != "meta")
    assert real == _layer_keys(LAYER)


def test_stored_dtype_is_kept(saved, tmp_path):
    half = tiny_llama(0, num_hidden_layers=4, tie_word_embeddings=False).half()
    half.save_pretrained(tmp_path / "fp16", max_shard_size="40KB")
    m16, _ = P.load_layer_weights(tmp_path / "fp16", [LAYER])
    w = m16.model.layers[LAYER].mlp.down_proj.weight
    assert w.dtype == torch.float16  # not upcast to fp32 for the whole job
    assert torch.equal(w, half.model.layers[LAYER].mlp.down_proj.weight)


def _comparable(x):
    """A layer JSON without the path of the Hessians it was computed from (the one field two jobs may spell
    differently)."""
    if isinstance(x, dict):
        return {k: _comparable(v) for k, v in x.items() if k != "hessian_file"}
    return x


def test_partial_job_compresses_bitwise_as_the_whole_fp32_model(saved, tmp_path):
    model, root = saved
    old = C.compress_model(model, root / "hess", "caldera", CALDERA, tmp_path / "old", layers=[LAYER],
                           progress=False)
    part, _ = P.load_layer_weights(root / "sharded", [LAYER])
    new = C.compress_model(part, root / "hess", "caldera", CALDERA, tmp_path / "new", layers=[LAYER],
                           progress=False, device="cpu")
    a, b = (C.layer_paths(tmp_path / d, LAYER) for d in ("old", "new"))
    assert a[0].read_bytes() == b[0].read_bytes()
    assert _comparable(json.loads(a[1].read_text())) == _comparable(json.loads(b[1].read_text()))
    assert old["bits"] == new["bits"]  # the model's shapes, from the meta skeleton


def test_fp16_checkpoint_compresses_as_its_fp32_upcast(saved, tmp_path):
    """Per matrix fp16 -> fp32 on the job's device is exact: the same layer as the upcast model's."""
    model, root = saved
    half = tiny_llama(0, num_hidden_layers=4, tie_word_embeddings=False).half()
    half.save_pretrained(tmp_path / "fp16", max_shard_size="40KB")
    up = half.float()
    C.compress_model(up, root / "hess", "caldera", CALDERA, tmp_path / "old", layers=[LAYER], progress=False)
    part, _ = P.load_layer_weights(tmp_path / "fp16", [LAYER])
    C.compress_model(part, root / "hess", "caldera", CALDERA, tmp_path / "new", layers=[LAYER], progress=False)
    a, b = (C.layer_paths(tmp_path / d, LAYER)[0] for d in ("old", "new"))
    assert a.read_bytes() == b.read_bytes()


def test_out_of_range_layer_and_missing_tensor(saved, tmp_path):
    _, root = saved
    with pytest.raises(ValueError, match="out of range"):
        P.load_layer_weights(root / "single", [4])
    idx = json.loads((root / "sharded" / P.INDEX_FILE).read_text())
    del idx["weight_map"][f"model.layers.{LAYER}.mlp.up_proj.weight"]
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in (root / "sharded").iterdir():
        (broken / f.name).symlink_to(f)
    (broken / P.INDEX_FILE).unlink()
    (broken / P.INDEX_FILE).write_text(json.dumps(idx))
    with pytest.raises(KeyError, match="up_proj"):
        P.load_layer_weights(broken, [LAYER])


def test_workflow_step_loads_only_its_chunk(saved, tmp_path, monkeypatch):
    """Rule compress_layers (step_compress_layers) reads its chunk's weights only, never the whole model, and
    writes the layer a whole-model compression writes."""
    import safetensors

    import caldera.pipeline.assets as assets
    from caldera.experiments.jobs import compress as compress_job
    from caldera.experiments.planning.plan import Variant
    from caldera.methods import get_method

    model, root = saved
    run = RunContext(name="t", device="cpu", dtype="auto", models={"m": model_entry(root / "sharded", 4)},
                     layers_per_job=2)
    v = Variant(id="v", model="m", method="caldera", params=CALDERA,
                config=get_method("caldera").make_config(CALDERA))
    monkeypatch.setattr(assets, "load_model", lambda *a, **k: pytest.fail("a compress job loaded the whole model"))
    spy = Spy(safetensors.safe_open)
    monkeypatch.setattr(safetensors, "safe_open", spy)
    res = compress_job.step_compress_layers(run, v, str(root / "hess"), 1, str(tmp_path / "job" / "chunk.json"))
    monkeypatch.undo()
    assert res["computed"] == [2, 3]
    assert sorted(k for k in spy.keys if k.startswith("model.")) == sorted(_layer_keys(2) + _layer_keys(3))
    C.compress_model(model, root / "hess", "caldera", v.config, tmp_path / "whole", layers=[2, 3], progress=False)
    for li in (2, 3):
        job, whole = (C.layer_paths(tmp_path / d, li)[0] for d in ("job", "whole"))
        assert job.read_bytes() == whole.read_bytes()


@pytest.mark.parametrize("make", ["llama", "gemma3"])
def test_hessians_with_one_layer_in_memory_at_a_time(tmp_path, make):
    """LazyLayers: only one decoder layer is real while it runs; the Hessian files are bitwise those of the
    whole model in memory."""
    from caldera.pipeline.hessian_files import layer_file
    from caldera.pipeline.layer_runner import decoder_layers
    from tests.helpers import tiny_gemma3

    model = (tiny_llama(0, num_hidden_layers=3, tie_word_embeddings=False) if make == "llama"
             else tiny_gemma3(0))
    model.save_pretrained(tmp_path / "m", max_shard_size="40KB")
    ids = torch.randint(0, 128, (5, 12), generator=torch.Generator().manual_seed(0))
    collect_hessians(model, ids, tmp_path / "whole", batch_size=2, progress=False, model_name="tiny")
    lazy = P.LazyLayers.open(tmp_path / "m")
    layers = decoder_layers(lazy.model)
    assert all(p.device.type == "meta" for p in layers.parameters())
    dense_buffers = dict(model.named_buffers())
    for name, buf in lazy.model.named_buffers():  # the restored non-persistent ones (Gemma-3's embed_scale) too
        if buf.device.type != "meta":
            assert torch.equal(buf, dense_buffers[name]), name
    real = []
    for layer in layers:
        layer.register_forward_pre_hook(
            lambda *_: real.append(sum(any(p.device.type != "meta" for p in lyr.parameters()) for lyr in layers)))
    collect_hessians(lazy.model, ids, tmp_path / "lazy", batch_size=2, progress=False, loader=lazy,
                     model_name="tiny")
    assert real and max(real) == 1 and lazy.stats["loaded"] == list(range(len(layers)))
    for li in range(len(layers)):
        a, b = (layer_file(tmp_path / d, li).read_bytes() for d in ("whole", "lazy"))
        assert a == b


def test_assemble_step_reads_no_compressed_layers_weights_and_writes_the_same_checkpoint(saved, tmp_path,
                                                                                        monkeypatch):
    """step_assemble: every tensor but the compressed linears (float32, as the whole-model load gave them);
    the checkpoint folder is byte for byte the one assembled from the whole fp32 model."""
    import safetensors

    import caldera.pipeline.assets as assets
    from caldera.experiments.jobs import compress as compress_job
    from caldera.experiments.planning.plan import Variant
    from caldera.methods import get_method
    from tests.helpers import word_tokenizer

    model, root = saved
    src = tmp_path / "src"
    model.save_pretrained(src, max_shard_size="40KB")
    tok = word_tokenizer()
    tok.save_pretrained(src)
    cfg = get_method("caldera").make_config(CALDERA)
    C.compress_model(model, root / "hess", "caldera", cfg, tmp_path / "layers", layers=[0, 1, 3], progress=False)
    run = RunContext(name="t", device="cpu", dtype="auto", models={"m": model_entry(src, 4)}, layers=(0, 1, 3))
    v = Variant(id="v", model="m", method="caldera", params=CALDERA, config=cfg)
    spy = Spy(safetensors.safe_open)
    monkeypatch.setattr(safetensors, "safe_open", spy)
    monkeypatch.setattr(assets, "load_model", lambda *a, **k: pytest.fail("the whole model was loaded"))
    compress_job.step_assemble(run, v, str(tmp_path / "layers"), str(tmp_path / "new"))
    monkeypatch.undo()
    read = set(spy.keys)
    assert not read & set(_layer_keys(0) + _layer_keys(1) + _layer_keys(3))  # compressed: never read
    assert set(_layer_keys(2)) <= read  # layer 2 stays dense (config layers): its weights are read
    C.assemble_checkpoint(model, tmp_path / "layers", tmp_path / "old", "caldera", cfg, tokenizer=src,
                          allow_partial=True, generation_config=(src / "generation_config.json").read_bytes())
    old = sorted(p.name for p in (tmp_path / "old").iterdir())
    assert old == sorted(p.name for p in (tmp_path / "new").iterdir())
    for name in old:
        assert (tmp_path / "old" / name).read_bytes() == (tmp_path / "new" / name).read_bytes(), name
