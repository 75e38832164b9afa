"""TFLite Micro: operators it lacks are refused by name, the arena is a bisection minimum, its
outputs match LiteRT's, and the generated C++ source holds the file and compiles."""

import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tensorflow.lite.python import schema_py_generated as schema
from tensorflow.lite.tools import flatbuffer_utils

from edge_rl.converters import convert, tflm
from edge_rl.converters.tflm import (
    ARENA_MARGIN,
    ARENA_STEP,
    TFLM_OPS,
    arena_size,
    check_tflm,
    compare_with_litert,
    fits_arena,
    litert_outputs,
    model_ops,
    resolver_method,
    tflm_outputs,
)
from edge_rl.converters.tflm_source import c_identifier, c_source, write_tflm
from edge_rl.device.policy_file import PolicyMetadata, read_policy_metadata
from edge_rl.device.runtime import EDGETPU_CUSTOM_OP
from edge_rl.tf_setup import tf

pytest.importorskip("tflite_micro")

DQN_META = PolicyMetadata(env_id="CartPole-v1", algo="dqn", precision="int8", output="q_values",
                          observation_shape=(4,), action={"kind": "discrete", "n": 2})
TD3_META = PolicyMetadata(env_id="Pendulum-v1", algo="td3", precision="int8", output="action",
                          observation_shape=(3,),
                          action={"kind": "continuous", "shape": [1], "low": [-2.0],
                                  "high": [2.0]})


def q_network(kernel_zeros: float = 0.0):
    """A DQN-like Q-network 4 -> 16 -> 16 -> 2; `kernel_zeros`: fraction of weights set to 0."""
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([
        tf.keras.Input((4,)),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(2),
    ])
    rng = np.random.default_rng(0)
    for layer in model.layers:
        kernel = layer.kernel.numpy()
        layer.kernel.assign(np.where(rng.random(kernel.shape) < kernel_zeros, 0.0, kernel))
    return model


def actor_network():
    """A TD3-like actor 3 -> 32 -> 32 -> 1, tanh scaled to Pendulum's bounds [-2, 2]."""
    tf.keras.utils.set_random_seed(1)
    inputs = tf.keras.Input((3,))
    x = tf.keras.layers.Dense(32, activation="relu")(inputs)
    x = tf.keras.layers.Dense(32, activation="relu")(x)
    unit = tf.keras.layers.Dense(1, activation="tanh")(x)
    return tf.keras.Model(inputs, tf.keras.layers.Lambda(lambda a: 2.0 * a)(unit))


def observations(n: int, features: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=(n, features)) * 1.5).astype(np.float32)


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    """int8 policy files: DQN and TD3 networks, and the DQN one fully integer ("edgetpu")."""
    q = q_network()
    return {
        "dqn": convert(q, "int8", observations(500, 4, 0), DQN_META),
        "td3": convert(actor_network(), "int8", observations(500, 3, 1), TD3_META),
        "edgetpu": convert(q, "edgetpu", observations(500, 4, 0),
                           replace(DQN_META, precision="edgetpu")),
    }


def with_opcode(flat: bytes, op_name: str, custom: str | None = None) -> bytes:
    """`flat` with its first operator's code replaced by `op_name` (a custom op if `custom`)."""
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(flat))
    code = model.operatorCodes[model.subgraphs[0].operators[0].opcodeIndex]
    code.builtinCode = getattr(schema.BuiltinOperator, op_name)
    code.deprecatedBuiltinCode = min(code.builtinCode, 127)
    if custom is not None:
        code.customCode = custom
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


# -- operators ----------------------------------------------------------------------------------


@pytest.mark.parametrize("net", ["dqn", "td3", "edgetpu"])
def test_policy_files_use_only_ops_tflite_micro_has(net, files):
    check_tflm(files[net])
    assert set(model_ops(files[net])) <= TFLM_OPS
    assert "FULLY_CONNECTED" in model_ops(files[net])


def test_the_op_table_holds_the_policy_ops_and_not_densify():
    policy_ops = {"FULLY_CONNECTED", "MUL", "ADD", "SUB", "MEAN", "TANH", "RELU", "QUANTIZE",
                  "DEQUANTIZE", "CONV_2D", "RESHAPE", "SOFTMAX", "LOGISTIC", "MAX_POOL_2D"}
    assert policy_ops <= TFLM_OPS
    assert not {"DENSIFY", "GELU", "TILE", "CUSTOM"} & TFLM_OPS
    assert all(hasattr(schema.BuiltinOperator, name) for name in TFLM_OPS)


@pytest.mark.parametrize("op_name, has_kernel", [
    ("FULLY_CONNECTED", True), ("TANH", True), ("MEAN", True), ("SUB", True), ("MUL", True),
    ("QUANTIZE", True), ("CONV_2D", True), ("DENSIFY", False), ("GELU", False),
    ("TILE", False),
])
def test_the_op_table_agrees_with_the_installed_tflite_micro(op_name, has_kernel, files):
    """TFLM says "Didn't find op for builtin opcode" exactly for the ops missing from TFLM_OPS
    (a model with the op in place of its first one; it may fail otherwise, or crash)."""
    assert (op_name in TFLM_OPS) == has_kernel
    with tflm._Micro(with_opcode(files["dqn"], op_name)) as micro:
        assert not micro.run(1 << 20) or has_kernel
        assert ("Didn't find op for builtin opcode" in micro.reason) != has_kernel, micro.reason


# Loads each model named on its command line in TFLite Micro, writing a marker to stderr first.
_LOAD_EACH = r"""
import sys
from tflite_micro.python.tflite_micro import runtime

for path in sys.argv[1:]:
    sys.stderr.write(f"@@{path}\n")
    sys.stderr.flush()
    try:
        runtime.Interpreter.from_bytes(open(path, "rb").read(), arena_size=1 << 20)
    except RuntimeError:
        pass
"""


def test_the_op_table_is_every_builtin_op_the_installed_tflite_micro_resolves(files, tmp_path):
    """Each of TFLite's builtin codes in place of a model's first op: TFLM finds a kernel for
    exactly those in TFLM_OPS (a model it finds one for may fail later, or crash)."""
    names = {v: k for k, v in vars(schema.BuiltinOperator).items()
             if not k.startswith("_") and isinstance(v, int) and k != "CUSTOM"}
    paths = []
    for name in names.values():
        paths.append(tmp_path / f"{name}.tflite")
        paths[-1].write_bytes(with_opcode(files["dqn"], name))
    missing, left = set(), list(paths)
    while left:  # a crash ends a child: go on after the model it crashed on
        run = subprocess.run([sys.executable, "-c", _LOAD_EACH, *map(str, left)],
                             capture_output=True, text=True, timeout=300)
        said = run.stderr.split("@@")[1:]
        for part in said:
            path, _, complaint = part.partition("\n")
            if "Didn't find op for builtin opcode" in complaint:
                missing.add(Path(path).stem)
        left = left[len(said):] if run.returncode else []
    assert set(names.values()) - missing == TFLM_OPS
    assert "DENSIFY" in missing


def test_a_sparse_file_is_refused_naming_densify():
    flat = convert(q_network(kernel_zeros=0.9), "int8", observations(500, 4, 0), DQN_META,
                   sparse_encoding=True)
    assert "DENSIFY" in model_ops(flat)
    with pytest.raises(ValueError, match=r"no kernel for DENSIFY \(a sparse weight encoding: "
                                         r"export dense int8 weights\)"):
        check_tflm(flat)
    with pytest.raises(ValueError, match="DENSIFY"):
        write_tflm(flat, "unused/policy-tflm.cc")


def test_every_unsupported_op_and_custom_op_is_named(files):
    edgetpu_compiled = with_opcode(files["dqn"], "CUSTOM", custom=EDGETPU_CUSTOM_OP)
    with pytest.raises(ValueError, match=f"custom operator {EDGETPU_CUSTOM_OP} .*Edge TPU"):
        check_tflm(edgetpu_compiled)
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(files["td3"]))
    ops = model.subgraphs[0].operators
    for op, name in zip(ops, ["GELU", "TILE"], strict=False):  # each its own opcode entry
        code = schema.OperatorCodeT()
        code.builtinCode = getattr(schema.BuiltinOperator, name)
        code.deprecatedBuiltinCode = min(code.builtinCode, 127)  # 127: look at builtinCode
        model.operatorCodes.append(code)
        op.opcodeIndex = len(model.operatorCodes) - 1
    two = bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    with pytest.raises(ValueError, match="TFLite Micro has no kernel for GELU, TILE$"):
        check_tflm(two)


def test_an_fp16_file_is_refused():
    flat = convert(q_network(), "fp16", None, replace(DQN_META, precision="fp16"))
    with pytest.raises(ValueError, match="float16"):
        check_tflm(flat)


def test_resolver_methods_are_tflite_micros_names():
    assert resolver_method("FULLY_CONNECTED") == "AddFullyConnected"
    assert resolver_method("CONV_2D") == "AddConv2D"
    assert resolver_method("PADV2") == "AddPadV2"
    assert resolver_method("SPACE_TO_BATCH_ND") == "AddSpaceToBatchNd"
    assert resolver_method("UNIDIRECTIONAL_SEQUENCE_LSTM") == "AddUnidirectionalSequenceLSTM"


# -- arena --------------------------------------------------------------------------------------


@pytest.mark.parametrize("net", ["dqn", "td3"])
def test_arena_size_is_the_bisection_minimum_plus_a_margin(net, files):
    started = time.perf_counter()
    arena = arena_size(files[net])
    assert time.perf_counter() - started < 10  # ~0.3 s here
    assert arena.measured % ARENA_STEP == 0
    assert fits_arena(files[net], arena.measured)
    assert not fits_arena(files[net], arena.measured - ARENA_STEP)
    assert arena.with_margin % ARENA_STEP == 0
    assert arena.with_margin >= arena.measured * (1 + ARENA_MARGIN)
    assert fits_arena(files[net], arena.with_margin)


def test_a_crash_in_tflite_micro_is_a_failed_run(files):
    """The tflite-micro interpreter segfaults on an arena too small for its bookkeeping."""
    with tflm._Micro(files["dqn"]) as micro:
        assert not micro.run(64)
        assert "crashed" in micro.reason
        assert micro.run(1 << 16)  # a new child takes over


def test_a_model_that_cannot_run_at_any_size_says_why(files, monkeypatch):
    monkeypatch.setattr(tflm, "MAX_ARENA_BYTES", 64 << 10)
    broken = with_opcode(files["dqn"], "DENSIFY")
    with pytest.raises(ValueError, match="64 KiB arena.*DENSIFY"):
        arena_size(broken)


# -- outputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("net, features", [("dqn", 4), ("td3", 3)])
def test_tflite_micro_matches_litert_on_random_observations(net, features, files):
    flat = files[net]
    obs = observations(64, features, seed=7)
    scale = read_policy_metadata(flat).input_scale
    inputs = (obs if scale is None else obs / np.asarray(scale, np.float32))[:, None, :]
    micro, lite = tflm_outputs(flat, inputs), litert_outputs(flat, inputs)
    step = tflm.output_step(flat)
    assert step > 0
    assert micro.shape == lite.shape == (64, 1, DQN_META.action["n"] if net == "dqn" else 1)
    # the same kernels on both sides: only the float output stage's summation order may
    # differ, far under a hidden unit rounded one level apart (~0.1-0.5 of a step; 6% of rows
    # for the TD3 net against LiteRT's XNNPACK delegate)
    assert np.abs(micro - lite).max() <= 0.01 * step
    assert compare_with_litert(flat) <= 0.01


def test_an_integer_file_matches_litert_in_its_own_units(files):
    assert compare_with_litert(files["edgetpu"]) == 0.0


def test_a_file_xnnpack_rounds_apart_is_compared_with_tflites_own_kernels():
    """A DQN file for 16x16 frames from a free-running CI run (uint8 frames in, float Q-values
    out): LiteRT's default XNNPACK delegate rounds some int8 units one level apart from
    TFLite's kernels, 1.02 output steps on the comparison's inputs, and its TFLM export was
    refused. TFLM runs it as LiteRT's built-in kernels do."""
    flat = (Path(__file__).parent / "data" / "tflm" / "brightpatch-dqn-int8.tflite").read_bytes()
    assert compare_with_litert(flat) <= 0.01


def test_outputs_that_differ_from_litert_are_refused(files, monkeypatch):
    step = tflm.output_step(files["dqn"])
    real = tflm.tflm_outputs
    monkeypatch.setattr(tflm, "tflm_outputs", lambda *a: real(*a) + 2 * step)
    with pytest.raises(ValueError, match="differ from LiteRT's by up to 2.00 output steps"):
        compare_with_litert(files["dqn"])


# -- C source -----------------------------------------------------------------------------------


def test_c_source_holds_the_array_alignment_arena_and_quantization(files):
    arena = tflm.ArenaSize(measured=2160, with_margin=2848)
    source, header = c_source(files["dqn"], "cartpole_policy", DQN_META, arena=arena)
    assert "alignas(16) const unsigned char cartpole_policy[] = {" in source
    assert f"const unsigned int cartpole_policy_len = {len(files['dqn'])};" in source
    assert '#include "cartpole_policy.h"' in source
    first = ", ".join(f"0x{b:02x}" for b in files["dqn"][:12])
    assert first in source and source.count("0x") == len(files["dqn"])
    assert "extern const unsigned char cartpole_policy[];" in header
    assert "#define CARTPOLE_POLICY_ARENA_SIZE 2848" in header
    assert "#define CARTPOLE_POLICY_ARENA_MEASURED 2160" in header
    assert "#define CARTPOLE_POLICY_INPUT_TYPE kTfLiteFloat32" in header
    assert "#define CARTPOLE_POLICY_INPUT_SHAPE {1, 4}" in header
    assert "#define CARTPOLE_POLICY_OUTPUT_SHAPE {1, 2}" in header
    assert "#define CARTPOLE_POLICY_ACTION_COUNT 2" in header
    assert '#define CARTPOLE_POLICY_OUTPUT_KIND "q_values"' in header
    assert '#define CARTPOLE_POLICY_ENV_ID "CartPole-v1"' in header
    assert "argmax" in header
    assert f"#define CARTPOLE_POLICY_OP_COUNT {len(model_ops(files['dqn']))}" in header
    assert "resolver.AddFullyConnected() == 0" in header
    step = tflm.output_step(files["dqn"])
    assert f"an output by {str(np.float32(step))}f" in header


def test_an_integer_files_header_gives_its_quantization(files):
    flat = files["edgetpu"]
    _, header = c_source(flat, "q", read_policy_metadata(flat), arena=tflm.ArenaSize(16, 32))
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(flat))
    graph = model.subgraphs[0]
    for kind, index in (("INPUT", graph.inputs[0]), ("OUTPUT", graph.outputs[0])):
        quantization = graph.tensors[index].quantization
        assert f"#define Q_{kind}_TYPE kTfLiteInt8" in header
        assert f"#define Q_{kind}_SCALE {str(np.float32(quantization.scale[0]))}f" in header
        assert f"#define Q_{kind}_ZERO_POINT {int(quantization.zeroPoint[0])}" in header
    scales = read_policy_metadata(flat).input_scale
    assert scales is not None
    assert "#define Q_OBSERVATION_SCALE {" + ", ".join(
        f"{str(np.float32(s))}f" for s in scales) + "}" in header


def test_a_continuous_policys_header_gives_the_bounds(files):
    _, header = c_source(files["td3"], "actor", TD3_META, arena=tflm.ArenaSize(16, 32))
    assert "#define ACTOR_ACTION_DISCRETE 0" in header
    assert "#define ACTOR_ACTION_LOW {-2.0f}" in header
    assert "#define ACTOR_ACTION_HIGH {2.0f}" in header
    assert "env units" in header


@pytest.mark.parametrize("name", ["1policy", "policy-tflm", "int", "", "a b"])
def test_names_that_are_not_c_identifiers_are_refused(name, files):
    with pytest.raises(ValueError, match="not a valid C identifier"):
        c_source(files["dqn"], name, DQN_META, arena=tflm.ArenaSize(16, 32))


def test_c_identifier_makes_file_stems_valid():
    assert c_identifier("policy-tflm") == "policy_tflm"
    assert c_identifier("2x") == "m_2x"


def test_write_tflm_writes_source_and_header_next_to_the_path(files, tmp_path):
    lines = write_tflm(files["dqn"], tmp_path / "run" / "policy-tflm.cc")
    source = (tmp_path / "run" / "policy-tflm.cc").read_text()
    header = (tmp_path / "run" / "policy-tflm.h").read_text()
    assert "const unsigned char policy_tflm[]" in source
    assert '#include "policy-tflm.h"' in source
    arena = arena_size(files["dqn"])
    assert f"#define POLICY_TFLM_ARENA_SIZE {arena.with_margin}" in header
    report = "\n".join(lines)
    assert "policy-tflm.cc" in report and "policy-tflm.h" in report
    assert f"{len(files['dqn']):,} bytes" in report
    assert f"{arena.measured:,} bytes measured" in report
    assert f"{arena.with_margin:,} with margin" in report
    assert "matches LiteRT" in report


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
@pytest.mark.parametrize("net", ["dqn", "edgetpu"])
def test_the_generated_source_compiles_and_holds_the_file(net, files, tmp_path):
    """g++ builds the .cc with a stand-in op resolver; the program sees the file's bytes,
    16-byte aligned; gcc reads the header as C too."""
    flat = files[net]
    source, header = c_source(flat, "policy", read_policy_metadata(flat),
                              arena=tflm.ArenaSize(2160, 2848))
    (tmp_path / "policy.cc").write_text(source)
    (tmp_path / "policy.h").write_text(header)
    methods = "\n".join(f"  int {resolver_method(op)}() {{ return added++, 0; }}"
                        for op in model_ops(flat))
    (tmp_path / "main.cc").write_text(f"""
#include <cstdint>
#include <cstdio>
#include "policy.h"
struct Resolver {{
  int added = 0;
{methods}
}};
alignas(16) static uint8_t arena[POLICY_ARENA_SIZE];
int main() {{
  Resolver resolver;
  const bool added = policy_add_ops(resolver);
  const int input_shape[] = POLICY_INPUT_SHAPE;
  const float observation_scale[] = POLICY_OBSERVATION_SCALE;
  unsigned long sum = 0;
  for (unsigned i = 0; i < policy_len; ++i) sum = (sum * 31 + policy[i]) % 1000000007UL;
  std::printf("%d %d %u %lu %lu %d %zu %zu\\n", added, resolver.added,
              policy_len, sum, (unsigned long)((uintptr_t)policy % 16), input_shape[1],
              sizeof(observation_scale) / sizeof(float), sizeof(arena));
}}
""")
    build = subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-o",
                            str(tmp_path / "main"), "main.cc", "policy.cc"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    checksum = 0
    for byte in flat:
        checksum = (checksum * 31 + byte) % 1000000007
    ran = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True)
    assert ran.stdout.split() == ["1", str(len(model_ops(flat))), str(len(flat)), str(checksum),
                                  "0", "4", "4", "2848"]
    if shutil.which("gcc"):
        c = subprocess.run(["gcc", "-x", "c", "-std=c11", "-fsyntax-only", "-Wall", "-Werror",
                            "policy.h"], cwd=tmp_path, capture_output=True, text=True)
        assert c.returncode == 0, c.stderr[-3000:]
