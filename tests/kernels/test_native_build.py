"""The C kernels' extension: built by setup.py as an optional setuptools extension, loaded by import,
one NativeKernelWarning with the fix and the Numba path when it is missing, portable variants chosen at run time.

Tests that switch the extension off clear ``native._ext``'s cache before and after, so the rest of the suite gets
the real extension back.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import types
import warnings
from pathlib import Path

import pytest
import torch

from caldera.kernels import native
from caldera.kernels.e8p_decode import codes_matmul_reference
from caldera.kernels.factors import Factors
from tests.helpers import kernel_close as _close
from tests.helpers import random_codes as _codes

cpu = pytest.importorskip("caldera.kernels.cpu")

ROOT = Path(__file__).resolve().parents[2]
EXT = "caldera.kernels._caldera_layer"
CAN_BUILD = bool(shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc")) and (
    Path(sysconfig.get_paths()["include"]) / "Python.h"
).is_file()
needs_ext = pytest.mark.skipif(not native.available(), reason="the C extension is not built")


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.delenv("CALDERA_NO_NATIVE", raising=False)
    native._ext.cache_clear()
    yield
    native._ext.cache_clear()


def _load():
    """``native.available()`` afresh, asked twice, with the NativeKernelWarning messages it gave."""
    native._ext.cache_clear()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ok = native.available() and native.available()
    return ok, [str(x.message) for x in w if issubclass(x.category, native.NativeKernelWarning)]


@pytest.mark.skipif(not CAN_BUILD, reason="no C compiler or no Python headers: the extension cannot be built here")
def test_extension_is_built_where_it_can_be():
    """With a compiler and the Python headers, ``pip install -e .`` (README, CI) builds the extension in place."""
    assert native.available(), f"the C extension is not built; {native.FIX}"
    assert Path(sys.modules[EXT].__file__).parent == Path(native.__file__).parent
    assert native.isa() in ("avx2", "scalar")


def test_missing_extension_warns_once_with_the_fix_and_falls_back(fresh, monkeypatch):
    monkeypatch.setitem(sys.modules, EXT, None)  # import fails, as when the build failed
    ok, msgs = _load()
    assert not ok and native.isa() is None and len(msgs) == 1
    assert "was not built" in msgs[0] and "install a C compiler" in msgs[0] and "reinstall caldera" in msgs[0]
    codes = _codes(13, 5, "e8p", seed=1)
    x = torch.randn(3, 40, generator=torch.Generator().manual_seed(2))
    _close(cpu.codes_matmul(x, codes, 0.5), codes_matmul_reference(x, codes.long(), 0.5, "e8p"))  # Numba
    with pytest.raises(RuntimeError, match="was not built"):
        cpu.codes_matmul(x, codes, 0.5, impl="native")
    with pytest.raises(RuntimeError, match="not built"):
        native.fused_layer(codes, torch.tensor(0.5), None, None, None, None, None)


def test_missing_extension_warning_is_visible_once_per_process():
    """A child process with default warning filters: three products on the Numba path, one warning on stderr."""
    code = (
        f"import sys; sys.modules[{EXT!r}] = None\n"
        "import torch\nfrom caldera.kernels import cpu\n"
        "c = torch.randint(0, 1 << 16, (4, 2)).to(torch.uint16)\n"
        "for _ in range(3): cpu.codes_matmul(torch.randn(1, 16), c, 0.5)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CALDERA_NO_NATIVE"}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("NativeKernelWarning") == 1 and "install a C compiler" in r.stderr, r.stderr


def test_no_native_forces_the_fallback_silently(fresh, monkeypatch):
    monkeypatch.setenv("CALDERA_NO_NATIVE", "1")
    assert _load() == (False, [])


def test_extension_of_other_sources_is_refused(fresh, monkeypatch):
    fake = types.ModuleType(EXT)
    fake.__file__ = "/somewhere/_caldera_layer.so"
    fake.LAYOUT = native.mirror_layout()
    monkeypatch.setitem(sys.modules, EXT, fake)
    assert _load() == (True, [])  # the mirrors' own layout is accepted
    fake.LAYOUT["caldera_layer_args"]["rs"] = (999, 4)  # a field moved
    ok, msgs = _load()
    assert not ok and len(msgs) == 1 and "built from other sources" in msgs[0] and "caldera_layer_args" in msgs[0]
    fake.LAYOUT = native.mirror_layout()
    fake.LAYOUT["caldera_mm_args"]["sizeof"] = 1
    ok, msgs = _load()
    assert not ok and "caldera_mm_args" in msgs[0]


@pytest.fixture(params=["scalar", "avx2"])
def isa(request):
    """Each variant of the built kernels in turn (avx2 skipped where the CPU lacks it); the default back after."""
    if not native.available():
        pytest.skip("the C extension is not built")
    try:
        before = native.select_isa(request.param)
    except ValueError as e:
        pytest.skip(str(e))
    yield request.param
    native.select_isa(before)


@pytest.mark.parametrize(
    ("quantizer", "dtype"), [("e8p", torch.uint16), ("e8p", torch.int64), ("e8p-rvq4", torch.uint32)]
)
@pytest.mark.parametrize("B", [1, 6])
def test_each_variant_computes_the_reference(isa, quantizer, dtype, B):
    assert native.isa() == isa
    n, m = 13, 5
    codes = _codes(n, m, quantizer, seed=B).to(torch.int64).to(dtype)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(B, 8 * m, generator=g)
    scale = torch.rand(n, 1, generator=g) + 0.5
    _close(cpu.codes_matmul(x, codes, scale, quantizer, impl="native"),
           codes_matmul_reference(x, codes.long(), scale, quantizer))  # fmt: skip
    t = torch.randn(B, n, generator=g)
    _close(cpu.codes_matmul_t(t, codes, 0.7, quantizer, impl="native"), t @ (0.7 * _dequant(codes, quantizer)))


def _dequant(codes, quantizer):
    """Q (n, 8m) of the codes, through the reference product with the identity."""
    m = codes.shape[1]
    return codes_matmul_reference(torch.eye(8 * m), codes.long(), 1.0, quantizer).T


@pytest.mark.parametrize("rht", [False, True])
def test_each_variant_runs_the_fused_layer(isa, rht):
    n, d, k = 24, 40, 3  # 24 = 3 * 8 and 40 = 5 * 8: Hadamard factors K > 1 on both sides with the RHT
    g = torch.Generator().manual_seed(5)
    codes = _codes(n, d // 8, "e8p", seed=4)
    L, R = torch.randn(n, k, generator=g).half(), torch.randn(k, d, generator=g).half()
    bias = torch.randn(n, generator=g)
    x = torch.randn(6, d, generator=g)
    su = sv = None
    if rht:
        su = (torch.randint(0, 2, (d,), generator=g) * 2 - 1).to(torch.int8)
        sv = (torch.randint(0, 2, (n,), generator=g) * 2 - 1).to(torch.int8)
    y = native.fused_layer(codes, torch.tensor(0.3), su, sv, Factors(L=L, R=R), None, bias)(x)
    if not rht:
        ref = codes_matmul_reference(x, codes.long(), 0.3, "e8p") + (x @ R.float().T) @ L.float().T + bias
        _close(y, ref)
        return
    before = native.select_isa("scalar")  # the RHT path: the variant equals the portable scalar build
    try:
        ref = native.fused_layer(codes, torch.tensor(0.3), su, sv, Factors(L=L, R=R), None, bias)(x)
    finally:
        native.select_isa(before)
    _close(y, ref)


def test_unknown_variant_is_refused():
    if not native.available():
        pytest.skip("the C extension is not built")
    with pytest.raises(ValueError, match="not available"):
        native.select_isa("avx512")


def _build_ext(tmp_path, **env):
    """``setup.py build_ext`` into ``tmp_path``: the completed process and the built module files."""
    pytest.importorskip("setuptools")
    lib = tmp_path / "lib"
    cmd = [sys.executable, "setup.py", "build_ext", "--build-lib", str(lib), "--build-temp", str(tmp_path / "tmp")]
    r = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
    return r, sorted(p for p in (lib / "caldera" / "kernels").glob("_caldera_layer*") if p.suffix != ".sha256")


def test_setup_without_a_compiler_succeeds_with_the_build_warning(tmp_path):
    r, built = _build_ext(tmp_path, CC="/nonexistent/cc")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f'building extension "{EXT}" failed' in r.stdout + r.stderr and built == []
    assert not list((tmp_path / "lib").rglob("*.sha256"))  # no record of a module that was not built


@pytest.mark.skipif(not CAN_BUILD, reason="no C compiler or no Python headers")
def test_setup_builds_a_portable_extension(tmp_path):
    """``setup.py build_ext`` (what pip runs) builds the module; it imports, and its structs match the mirrors."""
    r, built = _build_ext(tmp_path)
    assert r.returncode == 0 and len(built) == 1, r.stdout + r.stderr
    assert "-march" not in r.stdout + r.stderr  # no machine-specific code: the variant is chosen at run time
    from caldera.atomic import sha256_file

    record = Path(str(built[0]) + native.HASH_SUFFIX)  # the build records the module's sha256 beside it
    assert record.read_text().strip() == sha256_file(built[0]) and native.build_problem(str(built[0])) is None
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location({EXT!r}, {str(built[0])!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "from caldera.kernels import native\n"
        "print(native.layout_mismatch(m.LAYOUT), m.isa())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "None" and out.stdout.split()[1] in ("avx2", "scalar")


def test_kernel_sources_live_in_the_kernels_package():
    """One tree: setup.py builds the C sources of ``caldera/kernels/c/``, and the Triton modules are plain files of
    the package (a link would leave a wheel or a copy of the tree without them)."""
    setup_py = (ROOT / "setup.py").read_text()
    kernels = ROOT / "caldera" / "kernels"
    for f in ("caldera_layer.c", "caldera_layer.h", "caldera_layer_avx2.c", "caldera_module.c"):
        assert (kernels / "c" / f).is_file() and f"/{f}" in setup_py, f
    assert '"caldera/kernels/c"' in setup_py
    for f in ("triton_e8p.py", "triton_e8p_gemv.py"):
        assert (kernels / f).is_file() and not (kernels / f).is_symlink(), f
    assert not (ROOT / "kernels").exists()


def test_a_copy_of_a_prepared_layer_is_prepared_again():
    """The prepared call points into its own tensors: a deep copy of a layer must not compute from the original's."""
    import copy
    import pickle

    from caldera.nn.compressed_linear import CompressedLinear

    if not native.available():
        pytest.skip("the C extension is not built")
    g = torch.Generator().manual_seed(8)
    meta = {
        "version": 1, "method": "caldera", "in_features": 16, "out_features": 8, "q_quantizer": "e8p",
        "q_codes_dtype": "int32", "rht": False, "rank": 0, "ft_rank": 0, "lr_format": None, "l_quantizer": None,
        "r_quantizer": None, "lr_codes_dtype": None, "signs_trainable": False, "bias": False, "ft_dtype": None,
    }  # fmt: skip
    layer = CompressedLinear.from_tensors(meta, {"Q_codes": _codes(8, 2, "e8p", 1).int(), "Q_scale": torch.tensor(0.5)})
    x = torch.randn(1, 16, generator=g)
    y = layer(x)
    assert isinstance(layer._fused, native.FusedLayer)
    twin = copy.deepcopy(layer)
    assert twin._fused is None and pickle.loads(pickle.dumps(layer._fused)) is None
    twin.Q_codes.copy_(_codes(8, 2, "e8p", 2).int())  # the copy's own codes
    del layer
    _close(twin(x), codes_matmul_reference(x, twin.Q_codes.long(), 0.5, "e8p"))
    assert not torch.equal(twin(x), y)


# The extension module is found where a truncated or damaged copy of the real one lies; whatever the check says, the
# process must end normally (loading such a file kills the interpreter with SIGBUS, no message).
DAMAGED_CHILD = r"""
import importlib.util, sys
path = sys.argv[1]


class Here:
    @staticmethod
    def find_spec(name, target=None, *args):
        return importlib.util.spec_from_file_location(name, path) if name == "caldera.kernels._caldera_layer" else None


sys.meta_path.insert(0, Here)
import torch
from caldera.kernels import cpu, native
c = torch.randint(0, 1 << 16, (4, 2)).to(torch.uint16)
cpu.codes_matmul(torch.randn(3, 16), c, 0.5)
print("native", native.available())
"""


@pytest.mark.parametrize("size", [20_000, 100_000, None])
@pytest.mark.parametrize("record", ["as built", "missing"])
def test_a_damaged_build_is_never_loaded(tmp_path, size, record):
    """The module's sha256 recorded at build is checked before the module is loaded: a copy truncated to 20 kB
    (SIGBUS when loaded) or 100 kB (loads, and only the struct layout was checked), or one without its record,
    gives one NativeKernelWarning saying so and the Numba path; the intact copy with its record loads."""
    if not native.available():
        pytest.skip("the C extension is not built")
    from caldera.atomic import sha256_file

    real = Path(sys.modules[EXT].__file__)
    copy = tmp_path / real.name
    copy.write_bytes(real.read_bytes()[:size])
    if record == "as built":
        (tmp_path / (real.name + native.HASH_SUFFIX)).write_text(sha256_file(real) + "\n")
    r = subprocess.run([sys.executable, "-c", DAMAGED_CHILD, str(copy)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    if size is None and record == "as built":
        assert r.stdout.split() == ["native", "True"] and "NativeKernelWarning" not in r.stderr
        return
    assert r.stdout.split() == ["native", "False"] and r.stderr.count("NativeKernelWarning") == 1
    why = "truncated or damaged" if record == "as built" else "no build record"
    assert f"{copy} is not the file that was built" in r.stderr and why in r.stderr and "reinstall" in r.stderr
