"""TFLite Micro: check a policy file runs there, size its tensor arena, write it as C++ source.

    check_tflm(flat)                          # ValueError naming every op TFLM has no kernel for
    arena = arena_size(flat)                  # ArenaSize(measured=2160, with_margin=...)
    source, header = c_source(flat, "policy_tflm", read_policy_metadata(flat))
    lines = write_tflm(flat, "runs/x/policy-tflm.cc")   # all of it; writes .cc and .h there

TFLite Micro runs in a child process here (`tflite-micro` on PyPI, its Python interpreter with
the reference kernels): it segfaults on arenas too small for its own bookkeeping (~100 bytes)
and on some malformed graphs, and a crash there must be a failed run, not a dead exporter. A
failed allocation otherwise raises RuntimeError("TFLM failed to allocate tensors") and prints
the reason ("Failed to allocate tail memory. Requested: ..., available ...", "Didn't find op
for builtin opcode ...") on the child's stderr.
"""

from __future__ import annotations

import contextlib
import logging
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tensorflow.lite.python import schema_py_generated as schema

from edge_rl.converters.flatbuffer import builtin, read_model
from edge_rl.device.policy_file import output_step
from edge_rl.device.runtime import EDGETPU_CUSTOM_OP

log = logging.getLogger(__name__)

_OP = schema.BuiltinOperator
_TYPE = schema.TensorType
_OP_NAMES = {v: k for k, v in vars(_OP).items() if not k.startswith("_") and isinstance(v, int)}

# The builtin operators TFLite Micro has kernels for: every one its op resolver can register
# (MicroMutableOpResolver::Add...; the Python interpreter's PythonOpsResolver registers them
# all). Checked against tflite-micro 0.dev20261023182759 by loading a model with each of
# TFLite's builtin codes: these resolve, the other 105 give "Didn't find op for builtin
# opcode" (DENSIFY, GELU, TILE, REDUCE_PROD, CONV_3D, RELU_N1_TO_1, LSTM, the STABLEHLO_*...).
# A board's TFLM build may be older and lack a few of the newer ones.
TFLM_OPS = frozenset("""
    ABS ADD ADD_N ARG_MAX ARG_MIN ASSIGN_VARIABLE AVERAGE_POOL_2D BATCH_MATMUL
    BATCH_TO_SPACE_ND BROADCAST_ARGS BROADCAST_TO CALL_ONCE CAST CEIL CONCATENATION CONV_2D
    COS CUMSUM DEPTHWISE_CONV_2D DEPTH_TO_SPACE DEQUANTIZE DIV DYNAMIC_UPDATE_SLICE ELU
    EMBEDDING_LOOKUP EQUAL EXP EXPAND_DIMS FILL FLOOR FLOOR_DIV FLOOR_MOD FULLY_CONNECTED
    GATHER GATHER_ND GREATER GREATER_EQUAL HARD_SWISH IF L2_NORMALIZATION L2_POOL_2D
    LEAKY_RELU LESS LESS_EQUAL LOG LOGICAL_AND LOGICAL_NOT LOGICAL_OR LOGISTIC LOG_SOFTMAX
    MAXIMUM MAX_POOL_2D MEAN MINIMUM MIRROR_PAD MUL NEG NOT_EQUAL PACK PAD PADV2 PRELU
    QUANTIZE READ_VARIABLE REDUCE_ALL REDUCE_MAX REDUCE_MIN RELU RELU6 RESHAPE
    RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR REVERSE_V2 ROUND RSQRT SELECT_V2 SHAPE SIN SLICE
    SOFTMAX SPACE_TO_BATCH_ND SPACE_TO_DEPTH SPLIT SPLIT_V SQRT SQUARE SQUARED_DIFFERENCE
    SQUEEZE STRIDED_SLICE SUB SUM SVDF TANH TRANSPOSE TRANSPOSE_CONV
    UNIDIRECTIONAL_SEQUENCE_LSTM UNPACK VAR_HANDLE WHILE ZEROS_LIKE
""".split())
# Why an op is missing, where there is something to do about it.
_MISSING_HINTS = {
    "DENSIFY": "a sparse weight encoding: export dense int8 weights",
}
# MicroMutableOpResolver's Add... method where it is not the op's name in CamelCase.
_RESOLVER_METHODS = {
    "AVERAGE_POOL_2D": "AveragePool2D", "BATCH_MATMUL": "BatchMatMul", "CONV_2D": "Conv2D",
    "CUMSUM": "CumSum", "DEPTHWISE_CONV_2D": "DepthwiseConv2D", "L2_POOL_2D": "L2Pool2D",
    "MAX_POOL_2D": "MaxPool2D", "PADV2": "PadV2",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTM",
}  # fmt: skip

# The host measures the arena with TFLM's reference kernels on a 64-bit machine. A board's own
# bookkeeping is smaller (32-bit pointers halve TFLM's per-tensor and per-node structs), but
# its optimized kernels may ask for memory the reference kernels don't: CMSIS-NN's and
# ESP-NN's convolutions want im2col scratch buffers, and CMSIS-NN on Helium cores (Cortex-M55,
# M85) keeps int32 kernel sums, 4 bytes per output channel of every int8 FULLY_CONNECTED, in
# the arena (TFLM kernels/cmsis_nn/fully_connected.cc). So the arena written out is the
# measured one plus ARENA_MARGIN of it, plus the kernel sums, rounded up to ARENA_STEP.
ARENA_MARGIN = 0.25
KERNEL_SUM_BYTES = 4  # per output channel of each int8 FULLY_CONNECTED
ARENA_STEP = 16  # bisection granularity; TFLM aligns its allocations to 16 bytes anyway
FIRST_ARENA_GUESS = 16 << 10
MAX_ARENA_BYTES = 64 << 20
COMPARE_ROWS = 16  # network inputs run through TFLM and LiteRT by `compare_with_litert`

_NUMPY_TYPES = {_TYPE.FLOAT32: np.float32, _TYPE.INT8: np.int8, _TYPE.UINT8: np.uint8,
                _TYPE.INT16: np.int16, _TYPE.INT32: np.int32}

# The child process: loads the model (argv[1]) in TFLite Micro once per request line
# "ARENA [INPUTS.npy OUTPUTS.npy]": runs one zero input, or each row of INPUTS, and answers
# "@@ok" or "@@fail REASON" (TFLM's own complaints go to stderr).
_CHILD = r"""
import sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime

model = open(sys.argv[1], "rb").read()
for line in sys.stdin:
    words = line.split()
    try:
        interpreter = runtime.Interpreter.from_bytes(model, arena_size=int(words[0]))
        detail = interpreter.get_input_details(0)
        rows = np.load(words[1]) if len(words) > 1 else np.zeros((1, *detail["shape"]))
        outputs = []
        for row in rows:
            interpreter.set_input(np.asarray(row, detail["dtype"]), 0)
            interpreter.invoke()
            outputs.append(interpreter.get_output(0))
        if len(words) > 2:
            np.save(words[2], np.stack(outputs))
        print("@@ok", flush=True)
    except Exception as err:
        print("@@fail", " ".join(str(err).split()), flush=True)
"""


@dataclass(frozen=True)
class ArenaSize:
    """A model's tensor arena in bytes: as measured on the host, and with the board margin."""

    measured: int
    with_margin: int


def tflm_problems(model_bytes: bytes) -> list[str]:
    """The operators (and float16 tensors) in the model that TFLite Micro cannot run; [] if none."""
    model = read_model(model_bytes)
    problems: list[str] = []
    for graph in model.subgraphs or []:
        for op in graph.operators or []:
            code_number = builtin(model, op)
            if code_number == _OP.CUSTOM:
                code = model.operatorCodes[op.opcodeIndex].customCode
                name = code.decode(errors="replace") if isinstance(code, bytes) else str(code)
                hint = (" (an Edge TPU compiled model: export int8 for TFLite Micro)"
                        if name == EDGETPU_CUSTOM_OP else "")
                problem = f"custom operator {name}{hint}"
            else:
                name = _OP_NAMES.get(code_number, f"builtin operator {code_number}")
                if name in TFLM_OPS:
                    continue
                problem = name + (f" ({_MISSING_HINTS[name]})" if name in _MISSING_HINTS else "")
            if problem not in problems:
                problems.append(problem)
        if any(t.type == _TYPE.FLOAT16 for t in graph.tensors or []):
            problem = "float16 tensors (an fp16 export: its DEQUANTIZE takes 8 and 16-bit integers)"
            if problem not in problems:
                problems.append(problem)
    return problems


def check_tflm(model_bytes: bytes) -> None:
    """Raise ValueError naming every operator TFLite Micro has no kernel for, if there is one."""
    problems = tflm_problems(model_bytes)
    if problems:
        raise ValueError("TFLite Micro has no kernel for " + ", ".join(problems))


def model_ops(model_bytes: bytes) -> list[str]:
    """The builtin operators the model uses, by name, in order of first use."""
    model = read_model(model_bytes)
    names: list[str] = []
    for graph in model.subgraphs or []:
        for op in graph.operators or []:
            name = _OP_NAMES.get(builtin(model, op), "CUSTOM")
            if name not in names:
                names.append(name)
    return names


def resolver_method(op_name: str) -> str:
    """The tflite::MicroMutableOpResolver method that registers a builtin op ("AddConv2D")."""
    camel = _RESOLVER_METHODS.get(op_name) or "".join(p.capitalize() for p in op_name.split("_"))
    return "Add" + camel


class _Micro:
    """TFLite Micro on one model in a child process; a crash there is a failed run here."""

    def __init__(self, model_bytes: bytes):
        self._dir = tempfile.TemporaryDirectory(prefix="edge-rl-tflm-")
        self.dir = Path(self._dir.name)
        (self.dir / "model.tflite").write_bytes(model_bytes)
        self._stderr = open(self.dir / "stderr.txt", "w+b")  # closed in close()
        self._proc: subprocess.Popen | None = None
        self.reason = ""  # why the last run failed

    def __enter__(self) -> _Micro:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop()
        self._stderr.close()
        self._dir.cleanup()

    def _stop(self) -> int | None:
        """End the child (it exits when its stdin closes); its exit code, None if none ran."""
        if self._proc is None:
            return None
        with contextlib.suppress(OSError):  # a dead child's pipe
            self._proc.stdin.close()
        code = self._proc.wait()
        self._proc.stdout.close()
        self._proc = None
        return code

    def run(self, arena: int, request: str = "") -> bool:
        """Load the model with an `arena`-byte arena and run it (see _CHILD); True if it ran."""
        if self._proc is None:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, str(self.dir / "model.tflite")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        start = self._stderr.tell()
        try:
            self._proc.stdin.write(f"{arena} {request}\n")
            self._proc.stdin.flush()
            answer = ""
            while not answer.startswith("@@"):
                answer = self._proc.stdout.readline()
                if not answer:
                    break
        except BrokenPipeError:
            answer = ""
        if not answer:  # the child died
            answer = f"@@fail TFLite Micro crashed (exit code {self._stop()})"
        self._stderr.flush()
        self._stderr.seek(start)
        said = [line.strip() for line in self._stderr.read().decode(errors="replace").splitlines()]
        self._stderr.seek(0, 2)
        ok = answer.startswith("@@ok")
        self.reason = "" if ok else "; ".join([answer[7:].strip(), *filter(None, said)][-4:])
        log.debug("TFLM arena %d bytes: %s", arena, answer.strip())
        return ok


def fits_arena(model_bytes: bytes, arena_bytes: int) -> bool:
    """Whether TFLite Micro loads the model and runs it once on a zero input in that arena."""
    with _Micro(model_bytes) as micro:
        return micro.run(arena_bytes)


def arena_size(model_bytes: bytes) -> ArenaSize:
    """The smallest tensor arena (to ARENA_STEP bytes) with which TFLite Micro loads the model and
    runs it once, found by bisection, and that plus the board margin (see ARENA_MARGIN)."""
    started = time.perf_counter()
    with _Micro(model_bytes) as micro:
        low, high = 0, FIRST_ARENA_GUESS  # low fails (or is untried 0), high runs
        while not micro.run(high):
            if high >= MAX_ARENA_BYTES:
                raise ValueError(f"TFLite Micro cannot run this model even with a "
                                 f"{_kib(MAX_ARENA_BYTES)} arena: {micro.reason}")
            low, high = high, high * 2
        while high - low > ARENA_STEP:
            middle = (low + high) // 2 // ARENA_STEP * ARENA_STEP
            if micro.run(middle):
                high = middle
            else:
                low = middle
    margin = measured_margin = math.ceil(high * ARENA_MARGIN)
    margin += KERNEL_SUM_BYTES * _int8_fully_connected_outputs(model_bytes)
    with_margin = -(-(high + margin) // ARENA_STEP) * ARENA_STEP
    log.info("TFLM arena: %d bytes measured, %d with margin (%d + kernel sums %d) in %.2f s",
             high, with_margin, measured_margin, margin - measured_margin,
             time.perf_counter() - started)
    return ArenaSize(measured=high, with_margin=with_margin)


def _kib(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def _int8_fully_connected_outputs(model_bytes: bytes) -> int:
    """Output channels summed over the model's int8 FULLY_CONNECTED ops."""
    model = read_model(model_bytes)
    total = 0
    for graph in model.subgraphs or []:
        for op in graph.operators or []:
            if (builtin(model, op) == _OP.FULLY_CONNECTED
                    and graph.tensors[int(op.inputs[0])].type == _TYPE.INT8):
                total += int(graph.tensors[int(op.outputs[0])].shape[-1])
    return total


def tflm_outputs(model_bytes: bytes, inputs: np.ndarray, arena_bytes: int = 1 << 20) -> np.ndarray:
    """TFLite Micro's output tensor for each row of `inputs` (rows of the input tensor, batch
    dimension included: shape [n, 1, ...]), one invoke per row."""
    with _Micro(model_bytes) as micro:
        np.save(micro.dir / "in.npy", np.asarray(inputs))
        if not micro.run(arena_bytes, f"{micro.dir / 'in.npy'} {micro.dir / 'out.npy'}"):
            raise ValueError(f"TFLite Micro cannot run this model: {micro.reason}")
        return np.load(micro.dir / "out.npy")


def litert_outputs(model_bytes: bytes, inputs: np.ndarray) -> np.ndarray:
    """LiteRT's output tensor for each row of `inputs` (as for `tflm_outputs`), from its
    built-in kernels: TFLite's own, which TFLM's are ports of. LiteRT's default XNNPACK
    delegate is off here because it requantizes int8 its own way, one level apart from
    TFLite's kernels on some units, which a float output stage can show as just over one
    output step (1.02 on a BrightPatch DQN file); against the built-in kernels TFLM's outputs
    matched to 1e-4 of a step on each of 18 int8 files tried. That is on x86, where the export
    runs (tflite-micro ships no aarch64 wheel) and where ai-edge-litert 1.4 and 2.3 give the
    same outputs to the bit; on arm64 the built-in kernels round some units apart from x86's
    (docs/microcontrollers.md)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(
        model_content=model_bytes,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter.allocate_tensors()
    input_index = interpreter.get_input_details()[0]["index"]
    output_index = interpreter.get_output_details()[0]["index"]
    outputs = []
    for row in inputs:
        interpreter.set_tensor(input_index, row)
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(output_index).copy())
    return np.stack(outputs)


def compare_with_litert(model_bytes: bytes, arena_bytes: int = 1 << 20,
                        rows: int = COMPARE_ROWS, seed: int = 0) -> float:
    """The largest difference between TFLite Micro's and LiteRT's outputs (its built-in
    kernels: `litert_outputs`) on random network inputs, in output steps (for a float network:
    in units of 1e-4 of the largest output). Raises ValueError when it is more than one step:
    the two run the same kernels, so a file TFLM runs as TFLite defines it differs by float
    summation order at most; a missing or misread op differs by many steps."""
    model = read_model(model_bytes)
    graph = model.subgraphs[0]
    source, sink = graph.tensors[int(graph.inputs[0])], graph.tensors[int(graph.outputs[0])]
    shape = [int(d) for d in source.shape]
    dtype = _NUMPY_TYPES.get(source.type)
    if dtype is None:
        raise ValueError(f"cannot compare a network whose input is of TFLite type {source.type}")
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        inputs = rng.integers(info.min, info.max, (rows, *shape), endpoint=True).astype(dtype)
    else:
        inputs = (rng.normal(size=(rows, *shape)) * 2.0).astype(dtype)
    inputs[0] = 0
    micro = tflm_outputs(model_bytes, inputs, arena_bytes).astype(np.float64)
    lite = litert_outputs(model_bytes, inputs).astype(np.float64)
    if sink.type != _TYPE.FLOAT32:
        step = 1.0  # integer outputs: compared in their own units
    else:
        step = output_step(model_bytes) or 1e-4 * max(1.0, float(np.abs(lite).max()))
    worst = float(np.abs(micro - lite).max()) / step
    if worst > 1.0 + 1e-6:
        raise ValueError(f"TFLite Micro's outputs differ from LiteRT's by up to {worst:.2f} "
                         f"output steps on {rows} inputs (at most 1 is expected)")
    return worst
