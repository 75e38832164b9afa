"""Which TFLite interpreter runs policies: ai-edge-litert, else tflite-runtime.

LiteRT ran int8 networks 4-10x faster than tflite-runtime 2.14 on x86 here, so it is the
first choice. Set EDGE_RL_RUNTIME=tflite_runtime (or ai_edge_litert) to force one.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from edge_rl.device.errors import UserError

RUNTIMES = {
    # module name -> distribution name, in order of preference
    "ai_edge_litert": "ai-edge-litert",
    "tflite_runtime": "tflite-runtime",
}


@dataclass(frozen=True)
class Runtime:
    """An importable TFLite interpreter."""

    module: str
    version: str
    interpreter_class: Any

    def __str__(self) -> str:
        return f"{self.module} {self.version}"


def load_runtime(prefer: str | None = None) -> Runtime:
    """The interpreter to use: `prefer`, $EDGE_RL_RUNTIME, or the first that imports."""
    prefer = prefer or os.environ.get("EDGE_RL_RUNTIME") or None
    if prefer is not None and prefer not in RUNTIMES:
        raise UserError(f"unknown TFLite runtime {prefer!r}; choose one of {', '.join(RUNTIMES)}")
    candidates = [prefer] if prefer else list(RUNTIMES)
    for module in candidates:
        try:
            interpreter = importlib.import_module(f"{module}.interpreter")
        except ImportError:
            continue
        try:
            version = metadata.version(RUNTIMES[module])
        except metadata.PackageNotFoundError:
            version = "unknown"
        return Runtime(module, version, interpreter.Interpreter)
    raise UserError(
        "no TFLite runtime is installed: pip install ai-edge-litert (or tflite-runtime)"
        if prefer is None
        else f"the TFLite runtime {prefer!r} is not installed"
    )
