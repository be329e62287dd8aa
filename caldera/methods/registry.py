"""Method registry: a compression method is a frozen config class plus a function.

``fn(W, H, config, context=None) -> Decomposition`` with W (n, d), H (d, d). A method registered with
``shares_hessian_context=True`` accepts a :class:`~caldera.algorithm.decomposition.HessianContext` built once per
Hessian by :meth:`MethodSpec.prepare_context` (its config has ``rht``, ``seed`` and ``sigma_reg``), so the pipeline
shares one context between the matrices that read the same Hessian without knowing any method's fields. Register with::

    @register_method("my-method", MyConfig)
    def my_method(W, H, config, context=None): ...

Every module in ``caldera/methods/`` is imported by ``caldera.methods``, so adding one file adds a method
to the CLI, the pipeline and every table that names it in the workflow config.

**Methods outside the package.** A distribution registers its methods under the entry-point group
:data:`ENTRY_POINT_GROUP` (``caldera.methods``), one entry point per method, named as the method and pointing
at the module that registers it (``[project.entry-points."caldera.methods"] my-rounding = "my_pkg.rounding"``).
They are loaded lazily: :func:`get_method` imports the entry point of a name it does not know,
:func:`registered_methods` imports them all; an entry point that fails to import (or registers no method of
its name) raises ``ValueError`` naming it and its distribution.

**Shapes checked before any work.** :meth:`MethodSpec.shape_problems` says why a config cannot decompose an
(n, d) matrix: every positive integer field named ``rank`` or ``*_rank`` must satisfy 1 <= rank < min(n, d),
plus the method's own ``check_shape(config, n, d)`` (``register_method(..., check_shape=)``, raises
``ValueError``). ``caldera compress`` and the workflow's plan run it on every matrix shape first.

**Torch-free at import.** A method module imports torch and the engine inside its functions, not at the top:
the workflow hands each job its variant (with the method's config object) pickled, and a job that must pin
its CPU code paths before torch loads (``workflow/scripts/caldera_job.py``) unpickles it first; a config class
whose module imports torch would load torch before the pin. ``tests/methods`` checks every registered method.

**Randomness** (``register_method(..., random=)``). A method is *random* when one compression is one
realization of a random procedure (RHT signs, randomized sketches): two seeds give two models, and a comparison
needs their spread (``caldera.stats``). By default a method is random exactly when its config has a ``seed``
field; a deterministic method (round-to-nearest, GPTQ, an exact SVD) returns the same model for the same
inputs, gets no seed replicates and enters every interval with zero realization spread. ``family`` (default:
the method's name) groups methods whose realizations spread alike (``caldera.experiments.report.realization_pool``
pools their between-seed variance per family and stand-in for variants run with one seed).

**Model-level choices** (``register_method(..., plan=ModelPlan(profile, allocate))``). A method whose
per-matrix settings depend on the whole model (e.g. a rank per matrix at a fixed bit budget,
``caldera.methods.rank_per_layer``) gives two pure functions: ``profile(W, H, config, context)`` → a small
JSON-able dict per matrix (run where the matrices are, one job per layer chunk), then
``allocate(profiles, config)`` with ``profiles = {"<layer>.<linear>": profile}`` → ``{"<layer>.<linear>":
{field: value}}``, the overrides of ``config`` for each matrix (one job per model). The pipeline
(:mod:`caldera.pipeline.allocate`) runs both before compressing, and ``fn`` then receives each matrix's config
with its overrides applied; nothing else of the pipeline knows the method.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # the registry and every method's config class import without torch (module docstring)
    from caldera.algorithm.decomposition import Decomposition


@dataclass(frozen=True)
class ModelPlan:
    """A method's model-level step (module docstring): ``profile(W, H, config, context=None) -> dict`` per
    matrix, ``allocate(profiles: dict[str, dict], config) -> dict[str, dict]`` per-matrix config overrides."""

    profile: Callable[..., dict[str, Any]]
    allocate: Callable[[dict[str, dict[str, Any]], Any], dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class MethodSpec:
    name: str
    config_cls: type
    fn: Callable[..., Decomposition]
    shares_hessian_context: bool
    #: ``check_shape(config, n, d)`` raises ``ValueError`` when ``config`` cannot decompose an n×d matrix
    check_shape: Callable[[Any, int, int], None] | None = None
    #: the model-level step (:class:`ModelPlan`) of a method whose per-matrix settings depend on the whole model
    plan: ModelPlan | None = None
    #: one compression is one realization of a random procedure (module docstring)
    random: bool = True
    #: methods of one family share a pooled realization spread (module docstring)
    family: str = ""

    def make_config(self, params: Any = None) -> Any:
        """The method's typed config from ``params``: an instance of ``config_cls`` (returned as is) or a dict
        of its fields, where ``"preset"`` selects a preset that the other keys override. Unknown parameters,
        presets and bad values raise ``ValueError`` naming them."""
        if isinstance(params, self.config_cls):
            return params
        params = dict(params or {})
        preset = params.pop("preset", None)
        known = {f.name for f in dataclasses.fields(self.config_cls)}
        unknown = set(params) - known
        if unknown:
            close = {k: difflib.get_close_matches(k, sorted(known), n=1) for k in sorted(unknown)}
            hint = "; ".join(f"did you mean {c[0]!r} for {k!r}?" for k, c in close.items() if c)
            raise ValueError(f"method {self.name!r}: unknown parameters {sorted(unknown)}"
                             + (f" ({hint})" if hint else "") + f"; accepted: {sorted(known)}")
        defaults = {f.name: f.default for f in dataclasses.fields(self.config_cls)}
        for k, v in params.items():
            d = defaults[k]
            if isinstance(v, str) and isinstance(d, (bool, int, float)):
                kind = "true or false" if isinstance(d, bool) else "a number"
                raise ValueError(f"method {self.name!r}: {k}={v!r} is a string; {k} takes {kind}: write it without "
                                 f"quotes (e.g. {k}: {str(d).lower() if isinstance(d, bool) else d})")
        if preset is not None:
            if not hasattr(self.config_cls, "preset"):
                raise ValueError(f"method {self.name!r} has no presets; remove 'preset'")
            return self.config_cls.preset(preset, **params)
        return self.config_cls(**params)

    def shape_problems(self, config: Any, n: int, d: int) -> list[str]:
        """Why ``config`` cannot decompose an ``n``×``d`` (out × in) matrix; empty when it can. Every positive
        integer ``rank`` / ``*_rank`` field needs ``1 <= rank < min(n, d)`` (``caldera.validation.check_rank``);
        then the method's own ``check_shape``."""
        out = []
        for f in dataclasses.fields(config):
            v = getattr(config, f.name)
            if (f.name == "rank" or f.name.endswith("_rank")) and isinstance(v, int) and not isinstance(v, bool):
                if v > 0 and not v < min(n, d):
                    out.append(f"{f.name}={v} is too large (accepted: 1 <= {f.name} < min(n, d) = {min(n, d)})")
        if not out and self.check_shape is not None:
            try:
                self.check_shape(config, n, d)
            except ValueError as e:
                out.append(str(e))
        return out

    def check_shapes(self, config: Any, shapes: Any, where: str = "") -> None:
        """``ValueError`` listing every problem of ``config`` on ``shapes`` (``{name: (n, d)}``), each naming the
        method, the matrix and its shape (``where`` prefixes the message, e.g. the config key)."""
        errors = [f"{name} {n}×{d}: {p}" for name, (n, d) in shapes.items() for p in self.shape_problems(config, n, d)]
        if errors:
            head = f"{where}: " if where else ""
            raise ValueError(f"{head}method {self.name!r} cannot compress {len(errors)} matri"
                             f"{'x' if len(errors) == 1 else 'ces'}: " + "; ".join(errors))

    def prepare_context(self, H: Any, config: Any) -> Any:
        """The shared per-Hessian context for ``fn(..., context=)`` (regularization, RHT signs, factorizations),
        or None when the method takes none. ``H``: (d, d) float64."""
        if not self.shares_hessian_context:
            return None
        from caldera.algorithm.decomposition import HessianContext

        return HessianContext.prepare(H, rht=config.rht, seed=config.seed, sigma_reg=config.sigma_reg)


_REGISTRY: dict[str, MethodSpec] = {}
#: entry-point group of methods registered by other distributions (module docstring)
ENTRY_POINT_GROUP = "caldera.methods"
_LOADED_ENTRY_POINTS: set[str] = set()


def register_method(name: str, config_cls: type, *, shares_hessian_context: bool = False,
                    check_shape: Callable[[Any, int, int], None] | None = None, plan: ModelPlan | None = None,
                    random: bool | None = None, family: str | None = None):
    """Register ``fn(W, H, config, context=None) -> Decomposition`` as method ``name`` (module docstring).
    ``random``: None reads it from ``config_cls`` (random iff it has a ``seed`` field); a random method needs that
    field (its replicates set it). ``family``: None is ``name``."""
    has_seed = any(f.name == "seed" for f in dataclasses.fields(config_cls))
    if random is None:
        random = has_seed
    if random and not has_seed:
        raise ValueError(f"method {name!r}: random=True needs a 'seed' field in {config_cls.__name__} (each "
                         "realization is compressed with its own seed); add one or register with random=False")

    def deco(fn: Callable[..., Decomposition]) -> Callable[..., Decomposition]:
        if name in _REGISTRY:
            raise ValueError(f"method {name!r} is already registered")
        _REGISTRY[name] = MethodSpec(name, config_cls, fn, shares_hessian_context, check_shape, plan,
                                     bool(random), family or name)
        return fn

    return deco


def _entry_points() -> list[Any]:
    from importlib.metadata import entry_points

    return list(entry_points(group=ENTRY_POINT_GROUP))


def _load_entry_point(ep: Any) -> None:
    """Import one entry point (once); ``ValueError`` naming it when the import fails or registers no method of
    its name."""
    if ep.name in _LOADED_ENTRY_POINTS:
        return
    dist = getattr(getattr(ep, "dist", None), "name", None)
    what = f"entry point {ep.name!r} = {ep.value!r} (group {ENTRY_POINT_GROUP!r}" + (
        f", distribution {dist!r})" if dist else ")")
    try:
        ep.load()
    except Exception as e:  # any import-time failure of third-party code: say which entry point it was
        raise ValueError(f"{what} failed to import: {type(e).__name__}: {e}") from e
    _LOADED_ENTRY_POINTS.add(ep.name)
    if ep.name not in _REGISTRY:
        raise ValueError(f"{what} was imported but registered no method named {ep.name!r} (registered: "
                         f"{sorted(_REGISTRY)}); name the entry point as its @register_method")


def get_method(name: str) -> MethodSpec:
    if name not in _REGISTRY:
        eps = _entry_points()
        for ep in eps:
            if ep.name == name:
                _load_entry_point(ep)
        if name not in _REGISTRY:
            raise ValueError(f"unknown method {name!r}; registered: {sorted(set(_REGISTRY) | {e.name for e in eps})}")
    return _REGISTRY[name]


def registered_methods(strict: bool = True) -> list[str]:
    """Every method: this package's and those of the :data:`ENTRY_POINT_GROUP` entry points (imported here).
    ``strict=False`` leaves out an entry point that fails to import instead of raising (for ``--help``)."""
    for ep in _entry_points():
        if ep.name not in _REGISTRY:
            try:
                _load_entry_point(ep)
            except ValueError:
                if strict:
                    raise
    return sorted(_REGISTRY)


def config_to_json(config: Any) -> str:
    return json.dumps(dataclasses.asdict(config), sort_keys=True)
