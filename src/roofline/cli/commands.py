"""The list of sub-command modules. Each exposes `register(app)`."""

from __future__ import annotations

import importlib

_MODULES = [
    "roofline.cli.ceiling",  # ceiling, hardware list, models list
    "roofline.cli.probe",  # probe
    "roofline.cli.bench",  # bench
    "roofline.cli.generate",  # generate
    "roofline.cli.serve",  # serve
]


def _load():
    out = []
    for name in _MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:  # module not written yet
                continue
            raise
        out.append(mod.register)
    return out


REGISTRARS = _load()
