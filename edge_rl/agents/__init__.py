"""Algorithms. Each module here is one algorithm: it defines `ALGORITHM`, an AgentFactory.

Adding an algorithm is adding a file: `edge-rl train --algo NAME` finds `NAME.py` here.
Modules import TensorFlow, so they are loaded only when a run needs them.
"""

from __future__ import annotations

import importlib
import pkgutil

from edge_rl.device.errors import UserError

_NOT_ALGORITHMS = {"base", "networks", "specs"}


def algorithm_names() -> list[str]:
    """Names of the algorithms in this package (found without importing them)."""
    return sorted(
        m.name for m in pkgutil.iter_modules(__path__) if m.name not in _NOT_ALGORITHMS
    )


def get_algorithm(name: str):
    """The AgentFactory for `name`; a one-line error for unknown names."""
    if name not in algorithm_names():
        raise UserError(f"unknown algorithm {name!r}; choose one of {', '.join(algorithm_names())}")
    import edge_rl.tf_setup  # noqa: F401  (TensorFlow first, configured)

    return importlib.import_module(f"{__name__}.{name}").ALGORITHM
