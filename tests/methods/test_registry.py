"""The method registry (caldera.methods.registry): lookup, entry points, shape rules, torch-free configs, seeds."""

import pytest
import torch

from caldera.methods import get_method, registered_methods


def test_registry_lists_baselines():
    assert {"caldera", "quip#", "quip#-lr", "rtn"} <= set(registered_methods())
    with pytest.raises(ValueError, match="registered"):
        get_method("nope")
    with pytest.raises(ValueError, match="unknown parameters"):
        get_method("quip#").make_config({"rank": 3})


# ------------------------------------------------------------------ methods from other distributions (entry points)

EXT_MODULE = '''
from dataclasses import dataclass

from caldera.algorithm.decomposition import Decomposition
from caldera.methods.registry import register_method


@dataclass(frozen=True)
class ExtConfig:
    scale: float = 1.0


@register_method("ext-test-method", ExtConfig)
def ext(W, H, config, context=None):
    return Decomposition(method="ext-test-method", Q=W * config.scale, L=None, R=None, Q_codes=None, Q_scale=None)
'''


@pytest.fixture
def ext_dist(tmp_path, monkeypatch):
    """A distribution on sys.path (module + dist-info) declaring three ``caldera.methods`` entry points: one that
    works, one whose module does not import, one that registers nothing of its name."""
    import sys

    from caldera.methods import registry

    (tmp_path / "ext_caldera_method.py").write_text(EXT_MODULE)
    (tmp_path / "ext_broken_method.py").write_text("raise ImportError('needs libfoo')\n")
    (tmp_path / "ext_silent_method.py").write_text("X = 1\n")
    info = tmp_path / "ext_methods-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ext-methods\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[caldera.methods]\next-test-method = ext_caldera_method\nbroken-method = ext_broken_method\n"
        "silent-method = ext_silent_method\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_LOADED_ENTRY_POINTS", set())
    yield registry
    for m in ("ext_caldera_method", "ext_broken_method", "ext_silent_method"):
        sys.modules.pop(m, None)


def test_a_method_registered_through_an_entry_point_is_found_lazily(ext_dist):
    import sys

    assert "ext-test-method" not in ext_dist._REGISTRY and "ext_caldera_method" not in sys.modules
    spec = get_method("ext-test-method")  # imported on first use
    W = torch.ones(8, 8)
    assert torch.equal(spec.fn(W, torch.eye(8), spec.make_config({"scale": 2.0})).Q, 2 * W)
    assert "ext_broken_method" not in sys.modules  # only the entry point asked for was imported


def test_a_broken_entry_point_is_named_and_does_not_hide_the_others(ext_dist):
    with pytest.raises(ValueError) as e:
        get_method("broken-method")
    msg = str(e.value)
    assert "entry point 'broken-method' = 'ext_broken_method'" in msg and "'ext-methods'" in msg
    assert "failed to import: ImportError: needs libfoo" in msg
    with pytest.raises(ValueError, match="registered no method named 'silent-method'"):
        get_method("silent-method")
    with pytest.raises(ValueError, match="broken-method"):
        registered_methods()
    names = registered_methods(strict=False)  # --help lists what loads
    assert "ext-test-method" in names and "caldera" in names and "broken-method" not in names
    with pytest.raises(ValueError, match="unknown method 'nope'.*ext-test-method"):
        get_method("nope")


def test_the_cli_compresses_with_an_entry_point_method(ext_dist, tmp_path, monkeypatch):
    """`caldera compress --method <entry point>` reaches the method (the CLI asks the registry, not a list)."""
    from caldera import cli
    from caldera.cli import compress

    seen = {}

    def fake(args, params, layers):
        seen.update(method=args.method, params=params)
        return 0

    monkeypatch.setattr(compress, "_compress", fake)
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "hessians.json").write_text('{"model": "smollm2"}')  # the model compress takes
    assert cli.main(["compress", "--hessians", str(tmp_path / "h"), "--method", "ext-test-method", "--param",
                     "scale=3", "--out", str(tmp_path / "ck")]) == 0
    assert seen == {"method": "ext-test-method", "params": {"scale": 3}}
    assert cli.main(["compress", "--hessians", "h", "--method", "broken-method", "--out", str(tmp_path / "c")]) == 2


# ------------------------------------------------------------------ shapes checked before any work


def test_shape_problems_name_rank_and_size_rules():
    cal = get_method("caldera")
    cfg = cal.make_config({"rank": 200})
    assert cal.shape_problems(cfg, 576, 576) == []
    assert cal.shape_problems(cfg, 192, 576) == ["rank=200 is too large (accepted: 1 <= rank < min(n, d) = 192)"]
    assert cal.shape_problems(cal.make_config({"rank": 192}), 192, 576)  # rank == min(n, d) is refused too
    assert "not a multiple of 8" in cal.shape_problems(cal.make_config({"rank": 4}), 576, 100)[0]
    assert "quantized factors" in cal.shape_problems(cal.make_config({"rank": 4}), 100, 576)[0]
    assert cal.shape_problems(cal.make_config({"rank": 4, "l_bits": 16, "r_bits": 16}), 100, 576)[0].startswith(
        "no Hadamard transform of size 100")  # 16-bit factors take any n, the RHT does not
    assert cal.shape_problems(cal.make_config({"rank": 4, "l_bits": 16, "r_bits": 16, "rht": False}), 100, 576) == []
    q = get_method("quip#-lr")
    assert q.shape_problems(q.make_config({"lr_rank": 64}), 32, 64) == [
        "lr_rank=64 is too large (accepted: 1 <= lr_rank < min(n, d) = 32)"]
    assert get_method("quip#").shape_problems(get_method("quip#").make_config({}), 32, 64) == []  # lr_rank 0: none
    with pytest.raises(ValueError, match=r"method 'loftq' cannot compress 1 matrix: k_proj 192×576: rank=192"):
        get_method("loftq").check_shapes(get_method("loftq").make_config({"rank": 192}),
                                         {"q_proj": (576, 576), "k_proj": (192, 576)})


def test_every_method_and_every_shipped_variant_loads_without_torch(tmp_path):
    """A workflow job unpickles its variant (the method's config object) before it pins its CPU code paths
    (workflow/scripts/caldera_job.py), so every registered method's module and every variant of the shipped
    configs must load without importing torch (QuIP#, QuIP#-LR and LoftQ compressions once ran unpinned because
    their modules imported torch at the top)."""
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    from caldera.experiments.planning.plan import check_config, replicate_variants
    from caldera.methods import registered_methods

    snake = pytest.importorskip("snakemake.utils")
    root = Path(__file__).resolve().parents[2]
    variants = []
    for name in ("mini", "mini-full", "smoke", "paper"):
        cfg = yaml.safe_load((root / f"config/{name}.yaml").read_text())
        snake.validate(cfg, str(root / "workflow/schemas/config.schema.yaml"))
        vs = check_config(cfg)
        variants += list(vs.values()) + [r for reps in replicate_variants(cfg, vs).values() for r in reps]
    assert {v.method for v in variants} >= {"caldera", "quip#", "quip#-lr", "loftq", "caldera-rank-per-layer"}
    (tmp_path / "v.pkl").write_bytes(pickle.dumps(variants))
    code = ("import pickle, sys; vs = pickle.load(open(sys.argv[1], 'rb')); import caldera.methods as m; "
            "m.registered_methods(); bad = sorted(k for k in sys.modules if k == 'torch' or k.startswith('torch.')); "
            "print(len(vs), bad[:3])")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "v.pkl")], capture_output=True, text=True,
                       cwd=root, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split(maxsplit=1) == [str(len(variants)), "[]\n"], (r.stdout, sorted(registered_methods()))


def test_randomness_follows_the_seed_field_unless_declared():
    from dataclasses import dataclass as dc

    from caldera.methods.registry import register_method

    assert get_method("caldera").random and get_method("quip#-lr").random
    assert not get_method("rtn").random and not get_method("gptq").random
    assert get_method("quip#-lr").family == "quip#" and get_method("caldera-rank-per-layer").family == "caldera"

    @dc(frozen=True)
    class NoSeed:
        bits: int = 2

    with pytest.raises(ValueError, match="needs a 'seed' field"):
        register_method("random-without-seed", NoSeed, random=True)
