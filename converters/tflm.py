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
import json
import logging
import math
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tensorflow.lite.python import schema_py_generated as schema

from edge_rl.converters.tflite import _builtin, _read_model
from edge_rl.device.policy_file import PolicyMetadata, output_step, read_policy_metadata
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

# TFLite TensorType -> TFLM's TfLiteType enumerator, for the header.
_TFLITE_TYPES = {
    _TYPE.FLOAT32: "kTfLiteFloat32", _TYPE.INT8: "kTfLiteInt8", _TYPE.UINT8: "kTfLiteUInt8",
    _TYPE.INT16: "kTfLiteInt16", _TYPE.INT32: "kTfLiteInt32",
}  # fmt: skip
_NUMPY_TYPES = {_TYPE.FLOAT32: np.float32, _TYPE.INT8: np.int8, _TYPE.UINT8: np.uint8,
                _TYPE.INT16: np.int16, _TYPE.INT32: np.int32}
_C_KEYWORDS = frozenset("""
    alignas alignof and asm auto bool break case catch char class const constexpr continue
    default delete do double else enum explicit export extern false float for friend goto if
    inline int long mutable namespace new noexcept not nullptr operator or private protected
    public register restrict return short signed sizeof static struct switch template this
    throw true try typedef typeid typename union unsigned using virtual void volatile while
""".split())

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
    model = _read_model(model_bytes)
    problems: list[str] = []
    for graph in model.subgraphs or []:
        for op in graph.operators or []:
            builtin = _builtin(model, op)
            if builtin == _OP.CUSTOM:
                code = model.operatorCodes[op.opcodeIndex].customCode
                name = code.decode(errors="replace") if isinstance(code, bytes) else str(code)
                hint = (" (an Edge TPU compiled model: export int8 for TFLite Micro)"
                        if name == EDGETPU_CUSTOM_OP else "")
                problem = f"custom operator {name}{hint}"
            else:
                name = _OP_NAMES.get(builtin, f"builtin operator {builtin}")
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
    model = _read_model(model_bytes)
    names: list[str] = []
    for graph in model.subgraphs or []:
        for op in graph.operators or []:
            name = _OP_NAMES.get(_builtin(model, op), "CUSTOM")
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
    model = _read_model(model_bytes)
    total = 0
    for graph in model.subgraphs or []:
        for op in graph.operators or []:
            if (_builtin(model, op) == _OP.FULLY_CONNECTED
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
    """LiteRT's output tensor for each row of `inputs` (as for `tflm_outputs`)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model_bytes)
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
    """The largest difference between TFLite Micro's and LiteRT's outputs on random network
    inputs, in output steps (for a float network: in units of 1e-4 of the largest output).
    Raises ValueError when it is more than one step."""
    model = _read_model(model_bytes)
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


def c_source(model_bytes: bytes, name: str, metadata: PolicyMetadata, *,
             arena: ArenaSize | None = None, header_name: str | None = None) -> tuple[str, str]:
    """The C++ source (the model as a 16-byte aligned `const unsigned char NAME[]` and its
    length `NAME_len`) and the header for a microcontroller, as text.

    The header gives the arena size (measured with `arena_size` unless `arena` is given), the
    input and output tensors' type, shape and quantization, the ops for the op resolver, and
    the observation and action layouts from `metadata`. The array holds the policy file as
    it is, edge-rl's metadata included: it is the same file as the .tflite (the board can read
    its policy version), and costs only its few hundred bytes of flash. `header_name` is the
    header's file name for the source's #include (default NAME.h). `name` must be a valid C
    identifier (ValueError otherwise).
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in _C_KEYWORDS:
        raise ValueError(f"{name!r} is not a valid C identifier")
    check_tflm(model_bytes)
    arena = arena or arena_size(model_bytes)
    header_name = header_name or f"{name}.h"
    rows = [", ".join(f"0x{b:02x}" for b in model_bytes[i : i + 12])
            for i in range(0, len(model_bytes), 12)]
    source = "\n".join([
        f"// {Path(header_name).stem}: an edge-rl policy for TensorFlow Lite Micro, generated by",
        "// edge-rl; do not edit. The model is the .tflite policy file, byte for byte.",
        f'#include "{header_name}"',
        "",
        f"alignas(16) const unsigned char {name}[] = {{",
        *(f"    {row}," for row in rows),
        "};",
        f"const unsigned int {name}_len = {len(model_bytes)};",
        "",
    ])
    return source, _header(model_bytes, name, metadata, arena)


def _header(model_bytes: bytes, name: str, meta: PolicyMetadata, arena: ArenaSize) -> str:
    model = _read_model(model_bytes)
    graph = model.subgraphs[0]
    source, sink = graph.tensors[int(graph.inputs[0])], graph.tensors[int(graph.outputs[0])]
    p = name.upper()
    ops = model_ops(model_bytes)
    features = int(np.prod(meta.observation_shape))
    step = output_step(model_bytes)
    quantize = (f"clamp(round(x[i] / {p}_INPUT_SCALE) + {p}_INPUT_ZERO_POINT, -128, 127)"
                if source.type != _TYPE.FLOAT32 else "x[i]")
    dequantize = (f"(output[j] - {p}_OUTPUT_ZERO_POINT) * {p}_OUTPUT_SCALE"
                  if sink.type != _TYPE.FLOAT32 else "output[j]")
    act = {
        "q_values": "action = argmax_j y[j] (Q-values, or advantages: the same argmax)",
        "action": f"action[k] = clamp(y[k], {p}_ACTION_LOW[k], {p}_ACTION_HIGH[k]) (env units)",
        "squashed_gaussian": f"action[k] = clamp(y[k], {p}_ACTION_LOW[k], {p}_ACTION_HIGH[k]) "
                             "(output 0, env units; output 1: the mean and log-std to sample "
                             "from)",
        "mean_log_std": "action[k] = LOW[k] + (tanh(y[k]) + 1) / 2 * (HIGH[k] - LOW[k]), "
                        f"k < {p}_ACTION_DIM",
    }[meta.output]
    if meta.input_scale is None:
        obs_scale, why = (1.0,) * features, "all 1: the file takes the env's raw observations"
    else:
        obs_scale, why = meta.input_scale, "the network was built for features divided by these"
    if meta.discrete:
        action = (f"#define {p}_ACTION_DISCRETE 1\n"
                  f"#define {p}_ACTION_COUNT {int(meta.action['n'])}  /* actions 0..n-1 */")
    else:
        action = (f"#define {p}_ACTION_DISCRETE 0\n"
                  f"#define {p}_ACTION_DIM {len(meta.action['low'])}\n"
                  f"#define {p}_ACTION_LOW {_c_floats(meta.action['low'])}\n"
                  f"#define {p}_ACTION_HIGH {_c_floats(meta.action['high'])}")
    resolution = (f"/* int8 resolution: one int8 step moves an output by {_c_float(step)} */\n"
                  if step and sink.type == _TYPE.FLOAT32 else "")
    adds = " &&\n         ".join(f"resolver.{resolver_method(op)}() == 0" for op in ops)
    return f"""\
/* {name}: an edge-rl policy for TensorFlow Lite Micro, generated by edge-rl; do not edit.
 * {meta.env_id}, {meta.algo}, {meta.precision}, policy version {meta.policy_version}, \
train step {meta.train_step}.
 *
 * Each control step:
 *   1. x[i] = observation[i] / {p}_OBSERVATION_SCALE[i], i < {p}_OBSERVATION_SIZE
 *   2. input[i] = {quantize}
 *   3. interpreter.Invoke()
 *   4. y[j] = {dequantize}
 *   5. {act}
 */
#ifndef {p}_H_
#define {p}_H_

#ifdef __cplusplus
extern "C" {{
#endif
/* The .tflite policy file (edge-rl metadata included), 16-byte aligned: for
   tflite::GetModel({name}). */
extern const unsigned char {name}[];
extern const unsigned int {name}_len;
#ifdef __cplusplus
}}
#endif

/* Tensor arena: alignas(16) uint8_t arena[{p}_ARENA_SIZE]. TFLite Micro needed
   {arena.measured} bytes on the host (reference kernels; load and one invoke, by bisection):
   the rest is a margin for optimized kernels' scratch buffers (CMSIS-NN, ESP-NN). */
#define {p}_ARENA_SIZE {arena.with_margin}
#define {p}_ARENA_MEASURED {arena.measured}

/* Builtin ops, for a tflite::MicroMutableOpResolver<{p}_OP_COUNT>:
   {", ".join(ops)} ({name}_add_ops below adds them). */
#define {p}_OP_COUNT {len(ops)}

{_tensor_block(f"{p}_INPUT", source)}
{_tensor_block(f"{p}_OUTPUT", sink)}
{resolution}
#define {p}_ENV_ID {json.dumps(meta.env_id)}
#define {p}_ALGO {json.dumps(meta.algo)}
#define {p}_OBSERVATION_SHAPE {_c_ints(meta.observation_shape)}
#define {p}_OBSERVATION_SIZE {features}
/* observation[i] is divided by OBSERVATION_SCALE[i] ({why}) */
#define {p}_OBSERVATION_SCALE {_c_floats(obs_scale)}
#define {p}_OUTPUT_KIND {json.dumps(meta.output)}
{action}

#ifdef __cplusplus
/* Adds the model's ops to a tflite::MicroMutableOpResolver<{p}_OP_COUNT>; false if one fails. */
template <typename Resolver>
inline bool {name}_add_ops(Resolver& resolver) {{
  return {adds};
}}
#endif

#endif  /* {p}_H_ */
"""


def _tensor_block(prefix: str, tensor: Any) -> str:
    """#defines for a tensor's type, shape and (first) quantization scale and zero point."""
    shape = [int(d) for d in tensor.shape]
    scales = list(getattr(tensor.quantization, "scale", None) or [])
    zero_points = list(getattr(tensor.quantization, "zeroPoint", None) or [])
    kind = "input" if prefix.endswith("INPUT") else "output"
    what = "quantized" if scales else "float: not quantized, scale 0"
    return (f"/* The {kind} tensor ({what}) */\n"
            f"#define {prefix}_TYPE {_TFLITE_TYPES.get(tensor.type, tensor.type)}\n"
            f"#define {prefix}_SHAPE {_c_ints(shape)}\n"
            f"#define {prefix}_SIZE {int(np.prod(shape))}\n"
            f"#define {prefix}_SCALE {_c_float(scales[0] if scales else 0.0)}\n"
            f"#define {prefix}_ZERO_POINT {int(zero_points[0]) if zero_points else 0}")


def _c_float(value: float) -> str:
    text = str(np.float32(value))
    return text + ("f" if "." in text or "e" in text else ".0f")


def _c_ints(values: Any) -> str:
    return "{" + ", ".join(str(int(v)) for v in values) + "}"


def _c_floats(values: Any) -> str:
    return "{" + ", ".join(_c_float(v) for v in values) + "}"


def c_identifier(text: str) -> str:
    """`text` made a C identifier: other characters become "_", a leading digit gets "m_"."""
    name = re.sub(r"\W", "_", text, flags=re.ASCII) or "model"
    name = f"m_{name}" if name[0].isdigit() or name in _C_KEYWORDS else name
    return name


def write_tflm(model_bytes: bytes, out_path: str | Path) -> list[str]:
    """Check the policy file for TFLite Micro, measure its arena, check TFLM's outputs against
    LiteRT's, and write `<stem>.cc` and `<stem>.h` next to `out_path`; report lines.

    Raises ValueError when TFLite Micro cannot run the model, or runs it differently from LiteRT
    (by more than one output step), and PolicyFileError for a file without edge-rl metadata.
    """
    metadata = read_policy_metadata(model_bytes)
    check_tflm(model_bytes)
    started = time.perf_counter()
    arena = arena_size(model_bytes)
    seconds = time.perf_counter() - started
    worst = compare_with_litert(model_bytes, arena.measured)
    out = Path(out_path)
    source_path, header_path = out.with_suffix(".cc"), out.with_suffix(".h")
    source, header = c_source(model_bytes, c_identifier(out.stem), metadata, arena=arena,
                              header_name=header_path.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    source_path.write_text(source)
    header_path.write_text(header)
    return [
        f"wrote {source_path} and {header_path}",
        f"model: {len(model_bytes):,} bytes of flash (the .tflite file as a C array); ops: "
        f"{', '.join(model_ops(model_bytes))}",
        f"tensor arena: {arena.measured:,} bytes measured with TFLite Micro's reference kernels "
        f"(bisection, {seconds:.1f} s), {arena.with_margin:,} with margin for optimized kernels",
        f"TFLite Micro matches LiteRT on {COMPARE_ROWS} inputs (largest difference "
        f"{worst:.2f} output steps)",
    ]
