"""Method registry: a compression method is a frozen config class plus a function.

``fn(W, H, config, context=None) -> Decomposition`` with W (n, d), H (d, d). A method registered with
``shares_hessian_context=True`` accepts a :class:`~caldera.decomposition.HessianContext` built once per Hessian
by :meth:`MethodSpec.prepare_context` (its config has ``rht``, ``seed`` and ``sigma_reg``), so the pipeline shares
one context between the matrices that read the same Hessian without knowing any method's fields. Register with::

    @register_method("my-method", MyConfig)
    def my_method(W, H, config, context=None): ...

Every module in ``caldera/methods/`` is imported by ``caldera.methods``, so adding one file adds a method
to the CLI, the pipeline and every table that names it in the workflow config.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Callable

from caldera.decomposition import Decomposition


@dataclass(frozen=True)
class MethodSpec:
    name: str
    config_cls: type
    fn: Callable[..., Decomposition]
    shares_hessian_context: bool

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
            raise ValueError(f"method {self.name!r}: unknown parameters {sorted(unknown)}; accepted: {sorted(known)}")
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

    def prepare_context(self, H: Any, config: Any) -> Any:
        """The shared per-Hessian context for ``fn(..., context=)`` (regularization, RHT signs, factorizations),
        or None when the method takes none. ``H``: (d, d) float64."""
        if not self.shares_hessian_context:
            return None
        from caldera.decomposition import HessianContext

        return HessianContext.prepare(H, rht=config.rht, seed=config.seed, sigma_reg=config.sigma_reg)


_REGISTRY: dict[str, MethodSpec] = {}


def register_method(name: str, config_cls: type, *, shares_hessian_context: bool = False):
    def deco(fn: Callable[..., Decomposition]) -> Callable[..., Decomposition]:
        if name in _REGISTRY:
            raise ValueError(f"method {name!r} is already registered")
        _REGISTRY[name] = MethodSpec(name, config_cls, fn, shares_hessian_context)
        return fn

    return deco


def get_method(name: str) -> MethodSpec:
    if name not in _REGISTRY:
        raise ValueError(f"unknown method {name!r}; registered: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def registered_methods() -> list[str]:
    return sorted(_REGISTRY)


def config_to_json(config: Any) -> str:
    return json.dumps(dataclasses.asdict(config), sort_keys=True)
