"""Plugin registries derived from the plugins themselves: a plugin kind is a package whose
modules each define one object under an agreed name (WORKLOAD, ANALYSIS, …) that carries
its own `name`. Adding a plugin is adding its module; nothing lists it a second time."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any


def collect(package: str, attribute: str) -> dict[str, Any]:
    """{obj.name: obj} for every module of `package` that defines `attribute`, by name."""
    pkg = importlib.import_module(package)
    found = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        obj = getattr(importlib.import_module(f"{package}.{info.name}"), attribute, None)
        if obj is not None:
            found[obj.name] = obj
    return dict(sorted(found.items()))
