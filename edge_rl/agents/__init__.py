"""Algorithms: each module here is one, and registers its AgentFactory with `register()`.

Adding an algorithm is adding a file here (`edge-rl train --algo NAME` imports `NAME.py`), or,
outside edge-rl, a module that calls `register()`: `--algo package.module:NAME` imports it
first, as gymnasium does for env ids. What algorithms share lives in the `parts` package,
which is not a module of this folder and so never taken for an algorithm. Modules import
TensorFlow, so they are loaded only when a run needs them.
"""

from __future__ import annotations

import importlib
import pkgutil

from edge_rl.algorithm import AgentFactory
from edge_rl.device.errors import UserError

_REGISTERED: dict[str, AgentFactory] = {}


def register(factory: AgentFactory) -> AgentFactory:
    """Make `factory` the algorithm named `factory.name`; returns it."""
    _REGISTERED[factory.name] = factory
    return factory


def algorithm_names() -> list[str]:
    """The algorithms of this folder (found without importing them) and those registered."""
    here = {m.name for m in pkgutil.iter_modules(__path__) if not m.ispkg}
    return sorted(here | set(_REGISTERED))


def get_algorithm(name: str) -> AgentFactory:
    """The AgentFactory for `name` (or `module:name`, importing the module first); a one-line
    error for unknown names."""
    module, _, name = name.rpartition(":")
    if not module and name not in algorithm_names():
        raise UserError(f"unknown algorithm {name!r}; choose one of {', '.join(algorithm_names())}")
    import edge_rl.tf_setup  # noqa: F401  (TensorFlow first, configured)

    if module:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise UserError(f"cannot import {module!r} for --algo: {err}") from None
    elif name not in _REGISTERED and name in algorithm_names():
        importlib.import_module(f"{__name__}.{name}")
    if name not in _REGISTERED:
        raise UserError(f"importing {module!r} registered no algorithm {name!r} (it has: "
                        f"{', '.join(algorithm_names())})")
    return _REGISTERED[name]
