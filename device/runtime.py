"""Which TFLite interpreter runs policies: ai-edge-litert, else tflite-runtime; and delegates.

LiteRT ran int8 networks 4-10x faster than tflite-runtime 2.14 on x86 here, so it is the
first choice. Set EDGE_RL_RUNTIME=tflite_runtime (or ai_edge_litert) to force one.

A delegate hands (part of) the graph to an accelerator. "edgetpu" loads Coral's libedgetpu
through the runtime's own `load_delegate`; libedgetpu is built against one TFLite version, so
it must be the build made for the runtime it is loaded into (see docs/coral.md).
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
import platform
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from edge_rl.device.errors import UserError

log = logging.getLogger(__name__)

RUNTIMES = {
    # module name -> distribution name, in order of preference
    "ai_edge_litert": "ai-edge-litert",
    "tflite_runtime": "tflite-runtime",
}
# delegate name -> its shared library, per platform.system()
DELEGATES = {
    "edgetpu": {"Linux": "libedgetpu.so.1", "Darwin": "libedgetpu.1.dylib",
                "Windows": "edgetpu.dll"},
}
# What edgetpu_compiler puts in place of the ops it maps: a compiled model holds this custom op.
EDGETPU_CUSTOM_OP = "edgetpu-custom-op"
EDGETPU_INSTALL_HINT = (
    "install Coral's libedgetpu1-std package (apt repository "
    "https://packages.cloud.google.com/apt coral-edgetpu-stable); libedgetpu works only with "
    "the TFLite build it was made for, so it must match this runtime's version"
)


@dataclass(frozen=True)
class Runtime:
    """An importable TFLite interpreter."""

    module: str
    version: str
    interpreter_class: Any
    load_delegate: Any = None  # the module's load_delegate(library); None when it has none

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
        return Runtime(module, version, interpreter.Interpreter,
                       getattr(interpreter, "load_delegate", None))
    raise UserError(
        "no TFLite runtime is installed: pip install ai-edge-litert (or tflite-runtime)"
        if prefer is None
        else f"the TFLite runtime {prefer!r} is not installed"
    )


def delegate_library(name: str) -> str:
    """The shared library of delegate `name` on this platform."""
    if name not in DELEGATES:
        raise UserError(f"unknown delegate {name!r}; choose one of {', '.join(DELEGATES)}")
    libraries = DELEGATES[name]
    system = platform.system()
    if system not in libraries:
        raise UserError(f"the {name} delegate has no library for {system}")
    return libraries[system]


def load_delegate(runtime: Runtime, name: str) -> Any:
    """The delegate `name` (an entry of DELEGATES), loaded by `runtime`; a one-line UserError
    when the runtime cannot load delegates, the library is missing or finds no device."""
    library = delegate_library(name)
    if runtime.load_delegate is None:
        raise UserError(f"the TFLite runtime {runtime} cannot load delegates (it has no "
                        "load_delegate); install ai-edge-litert or tflite-runtime")
    try:  # opened here first: the runtime's Delegate, failing to, spews an ignored traceback
        open_library(library)
    except OSError as err:  # not installed, or not for this machine
        raise UserError(f"cannot load {library} ({_first_line(err)}): "
                        + EDGETPU_INSTALL_HINT) from None
    if name == "edgetpu":
        _warn_about_libedgetpu_pairing(runtime)
    try:
        return runtime.load_delegate(library)
    except ValueError as err:  # the library loaded but made no delegate
        detail = _first_line(err, skip=f"Failed to load delegate from {library}",
                             default="it gave no reason")
        raise UserError(f"{library} found no Edge TPU ({detail}): plug in the USB Accelerator "
                        "(or check the PCIe driver) and that this user may open it; if a "
                        "device is there, " + EDGETPU_INSTALL_HINT) from None
    except RuntimeError as err:  # e.g. delegates need CPython
        raise UserError(f"the TFLite runtime {runtime} cannot load {library}: "
                        f"{_first_line(err)}") from None


_warned_runtimes: set[str] = set()


def _warn_about_libedgetpu_pairing(runtime: Runtime) -> None:
    """Once per runtime: Coral's own libedgetpu is built for an old TFLite, and a mismatch can
    crash the process rather than fail cleanly, so say so before it happens."""
    try:
        version = tuple(int(part) for part in runtime.version.split(".")[:2])
    except ValueError:
        version = (0, 0)
    old_enough = runtime.module == "tflite_runtime" and (2, 5) <= version < (2, 12)
    if old_enough or str(runtime) in _warned_runtimes:
        return
    _warned_runtimes.add(str(runtime))
    log.warning(
        "Coral's libedgetpu1-std 16.0 was built for TFLite 2.5; users report it working up to "
        "tflite-runtime 2.11 and crashing with later ones (google-coral/edgetpu#812). With %s, "
        "use a libedgetpu built for this runtime's TFLite version", runtime)


def open_library(library: str) -> None:
    """Load a shared library (OSError when it is missing or not for this machine)."""
    ctypes.CDLL(library)


def _first_line(err: Exception, skip: str = "", default: str = "") -> str:
    lines = [line.strip() for line in str(err).splitlines()
             if line.strip() and line.strip() != skip]
    return lines[0] if lines else default or type(err).__name__
