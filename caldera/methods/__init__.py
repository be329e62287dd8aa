"""Registered compression methods (see :mod:`caldera.methods.registry`). Importing this package imports
every module in it, so each file's ``@register_method`` runs."""

import importlib
import pkgutil

from caldera.methods.registry import MethodSpec, get_method, register_method, registered_methods

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "registry":
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["MethodSpec", "get_method", "register_method", "registered_methods"]
