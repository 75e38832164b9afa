"""Coral Edge TPU: `convert(..., "edgetpu")` makes fully integer files that only use ops Coral
maps, the device runtime runs them like the fp32 files, unmappable ops are refused by name,
and the delegate path (no Edge TPU here) fails with one clear line."""

import ctypes.util
import logging

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import edge_rl
from tensorflow.lite.python import schema_py_generated as schema
from tensorflow.lite.tools import flatbuffer_utils
from test_cli_errors import check_one_line_error
from test_converter import (
    cartpole_metadata,
    cartpole_network,
    dense,
    pendulum_metadata,
    pendulum_network,
    recorded_observations,
)

from edge_rl.cli import cli
from edge_rl.config import ACTOR_PRECISIONS, EXPORT_PRECISIONS, TrainConfig
from edge_rl.converters import compare_policies, convert
from edge_rl.converters.edgetpu import (
    check_edgetpu,
    cpu_fallback_notes,
    edgetpu_problems,
    op_names,
)
from edge_rl.device import Policy, PolicyFileError
from edge_rl.device import runtime as runtime_module
from edge_rl.device.errors import UserError
from edge_rl.device.policy_file import read_policy_metadata
from edge_rl.device.runtime import EDGETPU_CUSTOM_OP, Runtime, load_delegate, load_runtime
from edge_rl.tf_setup import tf

HAS_LIBEDGETPU = ctypes.util.find_library("edgetpu") is not None


def converted(network, env_id: str, metadata) -> tuple:
    """Test observations and the network's fp32, int8 and edgetpu files."""
    model = network()
    calibration = recorded_observations(env_id, 1000, seed=1)
    test = recorded_observations(env_id, 2000, seed=2)
    return test, {p: convert(model, p, calibration, metadata(p))
                  for p in ("fp32", "int8", "edgetpu")}


@pytest.fixture(scope="module")
def cartpole():
    return converted(cartpole_network, "CartPole-v1", cartpole_metadata)


@pytest.fixture(scope="module")
def pendulum():
    return converted(pendulum_network, "Pendulum-v1", pendulum_metadata)


@pytest.fixture(scope="module")
def litert():
    pytest.importorskip("ai_edge_litert.interpreter")
    return load_runtime("ai_edge_litert")


def edited(flat: bytes, edit) -> bytes:
    """`flat` with `edit(model)` applied to its object form."""
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(flat))
    edit(model)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


# -- export -------------------------------------------------------------------------------------


@pytest.mark.parametrize("net, ops", [("cartpole", {"FULLY_CONNECTED", "MEAN", "SUB"}),
                                      ("pendulum", {"FULLY_CONNECTED", "TANH", "MUL"})])
def test_edgetpu_export_is_int8_at_the_boundary_and_uses_only_mappable_ops(net, ops, request):
    flat = request.getfixturevalue(net)[1]["edgetpu"]
    assert edgetpu_problems(flat) == []
    # independently of the checker: TFLite's own interpreter lists the ops and tensor types
    interpreter = tf.lite.Interpreter(model_content=flat)
    assert {op["op_name"] for op in interpreter._get_ops_details()} == ops  # no (DE)QUANTIZE
    for details in (interpreter.get_input_details()[0], interpreter.get_output_details()[0]):
        assert details["dtype"] == np.int8 and details["quantization"][0] > 0
        assert list(details["shape"]) == [1, *details["shape"][1:]]
    assert {d["dtype"] for d in interpreter.get_tensor_details()} <= {np.int8, np.int32}
    assert set(op_names(flat)) == ops
    meta = read_policy_metadata(flat)
    assert meta.precision == "edgetpu" and meta.input_scale is not None  # per-feature scales kept


@pytest.mark.parametrize("net", ["cartpole", "pendulum"])
def test_device_quantizes_and_dequantizes_as_the_files_tensors_say(net, request, litert):
    """The edgetpu file leaves to its caller what an int8 file does in its graph: dividing the
    observation by the metadata's input scales, quantizing it with the input tensor's (scale,
    zero point) and dequantizing the output with the output tensor's. Policy must do just
    that (here done by hand, row by row)."""
    test, files = request.getfixturevalue(net)
    flat = files["edgetpu"]
    scales = np.asarray(read_policy_metadata(flat).input_scale, np.float64)
    interpreter = litert.interpreter_class(model_content=flat)
    interpreter.allocate_tensors()
    given, taken = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    (in_scale, in_zero), (out_scale, out_zero) = given["quantization"], taken["quantization"]
    rows = test[:300]
    expected = []
    for row in rows:
        q = np.clip(np.round(row / scales / in_scale) + in_zero, -128, 127).astype(np.int8)
        interpreter.set_tensor(given["index"], q[None])
        interpreter.invoke()
        expected.append((interpreter.get_tensor(taken["index"])[0] - out_zero) * out_scale)
    gap = np.abs(Policy(flat, runtime=litert).outputs(rows) - np.asarray(expected))
    # float rounding may put an observation on the other side of a level, rarely
    assert (gap <= out_scale * 1e-3).mean() >= 0.99 and gap.max() <= 2.001 * out_scale


def test_edgetpu_policy_agrees_with_fp32_on_cartpole(cartpole, litert):
    test, files = cartpole
    reference, candidate = Policy(files["fp32"], runtime=litert), Policy(files["edgetpu"],
                                                                         runtime=litert)
    outputs = candidate.outputs(test[:8])
    assert outputs.dtype == np.float32 and outputs.shape == (8, 2)
    comparison = compare_policies(reference, candidate, test)
    assert comparison["agreement"] >= 0.95, comparison
    assert candidate.output_quantization[0] > 0  # the int8 output's step


def test_edgetpu_policy_acts_within_a_few_output_steps_on_pendulum(pendulum, litert):
    test, files = pendulum
    reference, candidate = Policy(files["fp32"], runtime=litert), Policy(files["edgetpu"],
                                                                         runtime=litert)
    numbers = compare_policies(reference, candidate, test)
    step = numbers["output_step"]
    assert 0.0 < step < 0.05
    # as for int8 (tests/test_converter.py): about one step typically, a few at worst
    assert numbers["mean_action_error"] <= 2 * step + 1e-3, numbers
    assert numbers["max_action_error"] <= 8 * step + 1e-3, numbers
    np.testing.assert_array_equal(candidate.act(test[:1]), candidate.act(test[:3])[:1])


def unmappable_network(activation):
    tf.keras.utils.set_random_seed(0)
    inputs = tf.keras.Input((4,))
    x = tf.keras.layers.Lambda(activation)(dense(16, 21)(inputs))
    return tf.keras.Model(inputs, dense(2, 22)(x))


@pytest.mark.parametrize("op, activation", [
    ("LEAKY_RELU", tf.nn.leaky_relu),  # quantized to int8 by TFLite, not in Coral's table
    ("EXP", tf.exp),  # the same
    ("ELU", tf.nn.elu),  # no int8 kernel: TFLite computes it in float between (de)quantizes
])
def test_operator_the_edge_tpu_cannot_map_is_refused_by_name(op, activation, cartpole):
    calibration = cartpole[0][:300]
    with pytest.raises(ValueError, match=rf"operator {op} \(op \d+\) is not supported"):
        convert(unmappable_network(activation), "edgetpu", calibration,
                cartpole_metadata("edgetpu"))


def test_checker_flags_float_boundaries_dynamic_shapes_rank_per_channel_and_versions(cartpole):
    test, files = cartpole
    fp32 = " | ".join(edgetpu_problems(files["fp32"]))
    assert "graph input 'serving_default_observation:0' is float32" in fp32
    assert "operator FULLY_CONNECTED (op 0))" in fp32 and "quantized to 8 bits" in fp32

    def break_rules(model):
        graph = model.subgraphs[0]
        graph.tensors[graph.inputs[0]].shapeSignature = np.array([-1, 4], np.int32)
        graph.tensors[graph.operators[1].outputs[0]].shape = np.array([2, 1, 1, 1, 32], np.int32)
        weights = graph.tensors[graph.operators[0].inputs[1]]
        weights.quantization.scale = np.full(32, weights.quantization.scale[0], np.float32)
        weights.quantization.zeroPoint = np.zeros(32, np.int64)
        mean = model.operatorCodes[graph.operators[3].opcodeIndex]
        mean.builtinCode = mean.deprecatedBuiltinCode = schema.BuiltinOperator.REDUCE_MAX

    problems = " | ".join(edgetpu_problems(edited(files["edgetpu"], break_rules),
                                           runtime_version=13))
    assert "has a dynamic shape [-1, 4]" in problems
    assert "has shape [2, 1, 1, 1, 32]" in problems
    assert "weights quantized per channel" in problems
    assert "operator REDUCE_MAX (op 3) needs Edge TPU runtime 14, not 13" in problems
    with pytest.raises(ValueError, match="cannot run on the Edge TPU: .*and \\d+ more"):
        check_edgetpu(files["fp32"])


def test_cpu_fallback_notes_name_the_mean_over_two_actions(cartpole, pendulum):
    notes = cpu_fallback_notes(cartpole[1]["edgetpu"])
    assert len(notes) == 1 and "MEAN (op 3)" in notes[0] and "size 2" in notes[0]
    assert cpu_fallback_notes(pendulum[1]["edgetpu"]) == []


def test_edgetpu_is_an_export_precision_not_an_actor_precision(tmp_path):
    assert "edgetpu" in EXPORT_PRECISIONS and "edgetpu" not in ACTOR_PRECISIONS
    with pytest.raises(UserError, match="--actor-precision"):
        TrainConfig(actor_precision="edgetpu").validate()
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "none"), "--edgetpu"])
    assert isinstance(result.exception, UserError), result.output
    assert "no run directory" in str(result.exception)  # the flag parsed, the precision known
    with pytest.raises(ValueError, match="sparse"):
        convert(None, "edgetpu", None, cartpole_metadata("edgetpu"), sparse_encoding=True)


# -- delegate -------------------------------------------------------------------------------------


@pytest.mark.skipif(HAS_LIBEDGETPU, reason="libedgetpu is installed here")
def test_eval_with_the_edgetpu_delegate_without_libedgetpu_is_a_one_line_error(cartpole,
                                                                               tmp_path):
    path = tmp_path / "policy-edgetpu.tflite"
    path.write_bytes(cartpole[1]["edgetpu"])
    result = edge_rl("eval", path, "--delegate", "edgetpu", "--episodes", "1")
    check_one_line_error(result, "libedgetpu1-std")


@pytest.fixture
def libedgetpu_opens(monkeypatch):
    """As if libedgetpu were installed: fake runtimes' load_delegate then decide."""
    monkeypatch.setattr(runtime_module, "open_library", lambda library: None)


def test_delegate_errors_are_user_errors(litert, libedgetpu_opens):
    with pytest.raises(UserError, match="cannot load delegates"):
        load_delegate(Runtime("bare", "0", litert.interpreter_class), "edgetpu")
    with pytest.raises(UserError, match="unknown delegate"):
        load_delegate(litert, "gpu")

    def no_device(library):
        raise ValueError(f"Failed to load delegate from {library}\nno device")

    with pytest.raises(UserError, match=r"found no Edge TPU \(no device\)"):
        load_delegate(Runtime("fake", "0", litert.interpreter_class, no_device), "edgetpu")


@pytest.mark.skipif(HAS_LIBEDGETPU, reason="libedgetpu is installed here")
def test_missing_libedgetpu_says_how_to_install_it(litert):
    with pytest.raises(UserError, match="libedgetpu1-std.*works only with the TFLite build"):
        load_delegate(litert, "edgetpu")


class RecordingInterpreter:
    """Stands in for a delegate-capable interpreter: records the delegates, runs on the CPU."""

    delegates: list = []

    def __new__(cls, model_content, num_threads=1, experimental_delegates=None):
        cls.delegates.append(experimental_delegates)
        from ai_edge_litert.interpreter import Interpreter

        return Interpreter(model_content=model_content, num_threads=num_threads)


def test_delegate_reaches_the_interpreter_and_an_uncompiled_model_warns(cartpole, litert,
                                                                        libedgetpu_opens, caplog):
    test, files = cartpole
    delegate = object()
    fake = Runtime("fake", "0", RecordingInterpreter, lambda library: delegate)
    with caplog.at_level(logging.WARNING):
        policy = Policy(files["edgetpu"], runtime=fake, delegate="edgetpu")
    assert RecordingInterpreter.delegates[-1] == [delegate]
    assert "every op runs on the CPU" in caplog.text
    # a delegated graph keeps batch 1: batches run row by row, as the CPU policy computes them
    np.testing.assert_array_equal(policy.outputs(test[:5]),
                                  Policy(files["edgetpu"], runtime=litert).outputs(test[:5]))

    def add_edgetpu_op(model):
        code = schema.OperatorCodeT()
        code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
        code.customCode = EDGETPU_CUSTOM_OP
        model.operatorCodes.append(code)

    compiled = edited(files["edgetpu"], add_edgetpu_op)
    with pytest.raises(PolicyFileError, match="--delegate edgetpu"):
        Policy(compiled, runtime=litert)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        Policy(compiled, runtime=fake, delegate="edgetpu")
    assert "CPU" not in caplog.text
