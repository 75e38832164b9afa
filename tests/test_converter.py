"""Keras -> TFLite policy files: precisions, metadata, accuracy, runtimes, corrupt files."""

import json
from dataclasses import replace

import numpy as np
import pytest
from tensorflow.lite.python import schema_py_generated as schema

from edge_rl.converters import (
    attach_metadata,
    bias_dtypes,
    calibration_rows,
    compare_policies,
    convert,
    verification_report,
    weight_dtypes,
)
from edge_rl.converters.flatbuffer import builtin as _builtin
from edge_rl.converters.flatbuffer import read_model as _read_model
from edge_rl.device import Policy, PolicyFileError, PolicyMetadata
from edge_rl.device.envs import make_env
from edge_rl.device.errors import UserError
from edge_rl.device.policy_file import METADATA_NAME, read_metadata_entries, read_policy_metadata
from edge_rl.device.runtime import load_runtime
from edge_rl.tf_setup import tf

PRECISIONS = ("fp32", "fp16", "int8")


def recorded_observations(env_id: str, n: int, seed: int) -> np.ndarray:
    """Observations of `n` env steps under a uniform random policy (float32; frames too, which
    hold their uint8 values exactly)."""
    env = make_env(env_id)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    rows = []
    while len(rows) < n:
        rows.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.asarray(rows, np.float32)


def dense(units, seed, activation=None):
    return tf.keras.layers.Dense(
        units,
        activation=activation,
        kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed),
        bias_initializer=tf.keras.initializers.RandomUniform(-0.1, 0.1, seed=seed + 100),
    )


def cartpole_network():
    """4 -> 32 -> 32 -> 2 Q-network whose output is centered (Q - mean Q), as DQN exports it."""
    tf.keras.utils.set_random_seed(0)
    inputs = tf.keras.Input((4,))
    x = dense(32, 1, "relu")(inputs)
    x = dense(32, 2, "relu")(x)
    q = dense(2, 3)(x)
    centered = tf.keras.layers.Lambda(lambda q: q - tf.reduce_mean(q, axis=-1, keepdims=True))(q)
    return tf.keras.Model(inputs, centered)


def pendulum_network():
    """3 -> 32 -> 32 -> 1 deterministic actor: tanh scaled to the bounds [-2, 2]."""
    tf.keras.utils.set_random_seed(0)
    inputs = tf.keras.Input((3,))
    x = dense(32, 11, "relu")(inputs)
    x = dense(32, 12, "relu")(x)
    unit = dense(1, 13, "tanh")(x)
    return tf.keras.Model(inputs, tf.keras.layers.Lambda(lambda a: 2.0 * a)(unit))


def cartpole_metadata(precision):
    return PolicyMetadata(
        env_id="CartPole-v1",
        algo="dqn",
        precision=precision,
        output="q_values",
        observation_shape=(4,),
        action={"kind": "discrete", "n": 2},
        policy_version=7,
        train_step=12_345,
        extra={"hidden": [32, 32], "note": "test"},
    )


def pendulum_metadata(precision):
    return PolicyMetadata(
        env_id="Pendulum-v1",
        algo="td3",
        precision=precision,
        output="action",
        observation_shape=(3,),
        action={"kind": "continuous", "shape": [1], "low": [-2.0], "high": [2.0]},
        policy_version=3,
        train_step=999,
    )


def converted(model, env_id: str, metadata) -> tuple:
    """The network, observations (calibration, test) and its policy file at each precision."""
    calibration = recorded_observations(env_id, 1000, seed=1)
    test = recorded_observations(env_id, 2000, seed=2)
    files = {p: convert(model, p, calibration, metadata(p)) for p in PRECISIONS}
    return model, calibration, test, files


@pytest.fixture(scope="module")
def cartpole():
    return converted(cartpole_network(), "CartPole-v1", cartpole_metadata)


@pytest.fixture(scope="module")
def pendulum():
    return converted(pendulum_network(), "Pendulum-v1", pendulum_metadata)


@pytest.fixture(scope="module")
def litert():
    pytest.importorskip("ai_edge_litert.interpreter")
    return load_runtime("ai_edge_litert")


# -- precisions --------------------------------------------------------------------------------


@pytest.mark.parametrize("net", ["cartpole", "pendulum"])
def test_int8_export_stores_int8_weights_and_int32_biases(net, request):
    """Every layer but the first (float32, fed the raw observation) and the last (float32,
    fed the dequantized last hidden activation) holds int8 weights."""
    model, _, _, files = request.getfixturevalue(net)
    int8 = files["int8"]
    assert weight_dtypes(int8) == {"int8", "float32"}
    assert bias_dtypes(int8) == {"int32", "float32"}
    flat = _read_model(int8)
    graph = flat.subgraphs[0]
    first_layer, *middle, last_layer = [op for op in graph.operators if _builtin(flat, op)
                                        == schema.BuiltinOperator.FULLY_CONNECTED]
    assert int(first_layer.inputs[0]) == int(graph.inputs[0])  # the raw observation
    for op in (first_layer, last_layer):
        assert graph.tensors[int(op.inputs[1])].type == schema.TensorType.FLOAT32
    assert len(middle) == len([layer for layer in model.layers
                               if isinstance(layer, tf.keras.layers.Dense)]) - 2 > 0
    assert all(graph.tensors[int(op.inputs[1])].type == schema.TensorType.INT8 for op in middle)
    # no int8 tensor after the last layer: the output is computed in float32
    after = graph.operators[list(graph.operators).index(last_layer):]
    assert all(graph.tensors[int(i)].type == schema.TensorType.FLOAT32
               for op in after for i in op.outputs)
    # every constant stored is read by an op: the int8 weights the float layers replaced are
    # not left in the file
    read = {int(i) for op in graph.operators for i in op.inputs if i >= 0}
    assert {i for i, tensor in enumerate(graph.tensors) if tensor.buffer
            and flat.buffers[tensor.buffer].data is not None
            and len(flat.buffers[tensor.buffer].data)} <= read
    # float first and last layers: for the tiny CartPole net int8 is fp16's size
    assert len(int8) < len(files["fp32"]) and len(files["fp16"]) < len(files["fp32"])


@pytest.mark.parametrize("net", ["cartpole", "pendulum"])
def test_fp16_and_fp32_exports_store_float16_and_float32_weights(net, request):
    files = request.getfixturevalue(net)[3]
    assert weight_dtypes(files["fp16"]) == {"float16"}
    assert weight_dtypes(files["fp32"]) == {"float32"}
    assert bias_dtypes(files["fp32"]) == {"float32"}


@pytest.mark.parametrize("net", ["cartpole", "pendulum"])
def test_fp32_export_matches_keras(net, request, litert):
    model, _, test, files = request.getfixturevalue(net)
    policy = Policy(files["fp32"], runtime=litert)
    expected = model(test[:64], training=False).numpy()
    np.testing.assert_allclose(policy.outputs(test[:64]), expected, atol=1e-5, rtol=0)
    assert policy.output_quantization == (0.0, 0)


def test_unknown_precision_and_int8_without_calibration_are_refused(cartpole):
    model = cartpole[0]
    with pytest.raises(ValueError, match="unknown precision"):
        convert(model, "int4", None, cartpole_metadata("int4"))
    with pytest.raises(ValueError, match="calibration"):
        convert(model, "int8", None, cartpole_metadata("int8"))
    with pytest.raises(ValueError, match="precision"):
        convert(model, "fp16", None, cartpole_metadata("fp32"))
    with pytest.raises(ValueError, match="shape"):
        convert(model, "int8", np.zeros((10, 3), np.float32), cartpole_metadata("int8"))


# -- metadata ----------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", PRECISIONS)
def test_metadata_round_trips(precision, cartpole, pendulum, litert):
    nets = ((cartpole, cartpole_metadata), (pendulum, pendulum_metadata))
    for (_, _, _, files), make_metadata in nets:
        expected = make_metadata(precision)  # no input scales: the files take raw observations
        meta = read_policy_metadata(files[precision])
        assert meta == expected
        for name in expected.__dataclass_fields__:  # field by field, for a readable failure
            assert getattr(meta, name) == getattr(expected, name), name
        assert Policy(files[precision], runtime=litert).metadata == expected
        assert "min_runtime_version" in read_metadata_entries(files[precision])


def test_attach_metadata_keeps_other_entries_and_replaces_its_own(cartpole, litert):
    flat = cartpole[3]["int8"]
    runtime_version = read_metadata_entries(flat)["min_runtime_version"]
    scaled = attach_metadata(flat, replace(cartpole_metadata("int8"), input_scale=(1.0,) * 4))
    with pytest.raises(ValueError, match="input scales"):  # that file's network needs them
        attach_metadata(scaled, replace(cartpole_metadata("int8"), policy_version=8))
    newer = replace(read_policy_metadata(flat), policy_version=8)
    again = attach_metadata(flat, newer)
    entries = read_metadata_entries(again)
    assert entries["min_runtime_version"] == runtime_version
    assert entries[METADATA_NAME] == newer.to_json()
    assert read_policy_metadata(again) == newer
    names = [name for name in _metadata_names(again) if name == METADATA_NAME]
    assert names == [METADATA_NAME]
    policy = Policy(again, runtime=litert)
    assert policy.version == 8
    test = cartpole[2][:64]
    np.testing.assert_array_equal(policy.outputs(test), Policy(flat, runtime=litert).outputs(test))


def _metadata_names(flat):
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(flat))
    return [m.name.decode() for m in model.metadata]


# -- int8 accuracy and batches -----------------------------------------------------------------


@pytest.mark.parametrize("net", ["cartpole", "pendulum"])
def test_int8_policy_runs_batches(net, request, litert):
    _, _, test, files = request.getfixturevalue(net)
    policy = Policy(files["int8"], runtime=litert)
    batch = policy.outputs(test[:64])
    one_by_one = np.concatenate([policy.outputs(row[None]) for row in test[:64]])
    np.testing.assert_array_equal(batch, one_by_one)
    actions = policy.act(test[:64])
    assert actions.shape[0] == 64
    if policy.metadata.discrete:
        assert set(np.unique(actions)) <= {0, 1}
    else:
        assert actions.shape == (64, 1) and np.all(np.abs(actions) <= 2.0)


def test_int8_continuous_actions_stay_within_a_few_output_steps(pendulum, litert):
    _, _, test, files = pendulum
    reference = Policy(files["fp32"], runtime=litert)
    candidate = Policy(files["int8"], runtime=litert)
    numbers = compare_policies(reference, candidate, test)
    step = numbers["output_step"]
    # the float output stage's step before tanh, times the action's half-range (2)
    assert step == pytest.approx(2.0 * candidate.output_step) and step > 0.0
    # Typical errors are about one output step; rounding in the hidden layers adds up to a few
    # more on the worst of 2000 observations (5.9 steps with these seeds).
    assert numbers["mean_action_error"] <= 2 * step + 1e-3, numbers
    assert numbers["max_action_error"] <= 8 * step + 1e-3, numbers
    report = verification_report(numbers, candidate, reference)
    assert "KiB" in report and "action error" in report


def test_int8_discrete_greedy_actions_agree_with_fp32(cartpole, litert):
    _, _, test, files = cartpole
    reference = Policy(files["fp32"], runtime=litert)
    candidate = Policy(files["int8"], runtime=litert)
    numbers = compare_policies(reference, candidate, test)
    assert numbers["n"] == len(test)
    assert numbers["agreement"] >= 0.95, numbers
    assert candidate.output_step > 0.0
    assert "agree" in verification_report(numbers, candidate, reference)


def balanced_scales(model, calibration) -> np.ndarray:
    """sqrt(a_i / w_i): feature i's largest |value| over the calibration rows the converter
    uses, over the largest |weight| of its row in the first kernel."""
    first = next(layer for layer in model.layers if isinstance(layer, tf.keras.layers.Dense))
    absmax = np.abs(calibration_rows(calibration, (first.kernel.shape[0],))).max(axis=0)
    return np.sqrt(absmax / np.abs(first.kernel.numpy()).max(axis=1))


def mixed_range_network(weigh_back: bool = True):
    """8 features, the last four 50x wider than the first four, and a first layer that weighs
    them back to a common footing (`weigh_back`: every feature matters) or one with
    heavy-tailed weights, the narrow features' rows 4x the wide ones' (nearer walker-stand's
    trained actor)."""
    tf.keras.utils.set_random_seed(0)
    inputs = tf.keras.Input((8,))
    first = dense(64, 21, "relu")
    x = first(inputs)
    x = dense(64, 22, "relu")(x)
    outputs = dense(2, 23, "tanh")(x)
    model = tf.keras.Model(inputs, outputs)
    kernel, bias = first.get_weights()
    if weigh_back:
        kernel = kernel / WIDTHS[:, None]
    else:
        heavy = np.random.default_rng(1).standard_t(2, kernel.shape)
        kernel = kernel * heavy * NARROW_ROWS[:, None]
    first.set_weights([kernel.astype(np.float32), bias])
    return model


WIDTHS = np.array([1, 1, 1, 1, 50, 50, 50, 50], np.float32)
NARROW_ROWS = np.array([4, 4, 4, 4, 1, 1, 1, 1], np.float32)


def mixed_range_observations(rng, n: int, heavy_tails: bool) -> np.ndarray:
    """Features within +-WIDTHS: uniform, or (`heavy_tails`) the wide ones mostly within +-2
    and reaching +-50 now and then, as velocities do."""
    if not heavy_tails:
        return (rng.uniform(-1, 1, (n, 8)) * WIDTHS).astype(np.float32)
    wide = np.clip(rng.standard_t(1.5, (n, 4)), -50, 50)
    return np.concatenate([rng.uniform(-1, 1, (n, 4)), wide], axis=1).astype(np.float32)


def mixed_range_errors(litert, weigh_back: bool, heavy_tails: bool = False,
                       precision: str = "int8") -> dict:
    """The mean action error against fp32 of `precision` policies of `mixed_range_network`
    made (a) by the converter (int8: a float first layer; edgetpu: per-feature input scales),
    (b) with one scale for the whole input, (c) with scales of each feature's largest |value|
    alone (the rows grow by up to 50x: one weight scale then crushes the narrow rows)."""
    rng = np.random.default_rng(0)
    calibration, test = (mixed_range_observations(rng, n, heavy_tails) for n in (500, 2000))
    model = mixed_range_network(weigh_back)
    meta = replace(pendulum_metadata("fp32"), observation_shape=(8,), action={
        "kind": "continuous", "shape": [2], "low": [-1.0, -1.0], "high": [1.0, 1.0]})
    quantized = replace(meta, precision=precision)
    reference = Policy(convert(model, "fp32", None, meta), runtime=litert)
    per_feature = Policy(convert(model, precision, calibration, quantized), runtime=litert)

    def one_input_scale(precision: str, rows: np.ndarray) -> Policy:
        # A layer in front of the first Dense (identity) leaves one scale for the input.
        wrapped = tf.keras.Sequential([tf.keras.layers.Lambda(lambda x: x), model])
        wrapped.build((None, 8))
        return Policy(convert(wrapped, precision, rows, replace(meta, precision=precision)),
                      runtime=litert)

    errors = {name: compare_policies(reference, policy, test)["mean_action_error"]
              for name, policy in (("per_feature", per_feature),
                                   ("one_scale", one_input_scale(precision, calibration)))}
    # Each feature divided by its own largest |value| on the way in and its kernel row
    # multiplied by it: the same float network, fed observations within [-1, 1].
    absmax = np.abs(calibration).max(axis=0)
    first = model.layers[1]
    kernel = first.kernel.numpy()
    first.kernel.assign(kernel * absmax[:, None])
    try:
        scaled = one_input_scale(precision, calibration / absmax)
        scaled_reference = one_input_scale("fp32", None)
    finally:
        first.kernel.assign(kernel)
    errors["absmax_alone"] = compare_policies(scaled_reference, scaled, test / absmax)[
        "mean_action_error"]
    if precision == "edgetpu":
        np.testing.assert_allclose(per_feature.metadata.input_scale,
                                   balanced_scales(model, calibration), rtol=1e-5)
    else:
        assert per_feature.metadata.input_scale is None  # raw observations in
    return errors


def test_int8_reads_each_input_feature_at_full_precision(litert):
    """With one int8 input scale for all features, the narrow ones get few levels (about 5
    here); with the first layer in float32, the actions follow the fp32 network's much more
    closely."""
    errors = mixed_range_errors(litert, weigh_back=True)
    assert errors["per_feature"] < 0.5 * errors["one_scale"], errors


def test_int8_input_scales_leave_the_first_kernel_rows_balanced(litert):
    """Wide heavy-tailed features (velocities) whose kernel rows are not weighed down, next to
    narrow ones with heavy-tailed weights (a trained network's). Scaling each feature by its
    range alone makes the wide rows ~50x the others under one weight scale, which crushes the
    narrow rows' weights (walker-stand lost 0.16 of action to it); the balanced scales
    (sqrt of range over row) beat that and one input scale for all (measured: 0.047 against
    0.082 and 0.104)."""
    errors = mixed_range_errors(litert, weigh_back=False, heavy_tails=True, precision="edgetpu")
    assert errors["per_feature"] < 0.75 * errors["absmax_alone"], errors
    assert errors["per_feature"] < 0.6 * errors["one_scale"], errors


def test_input_scales_in_metadata_are_checked():
    good = replace(pendulum_metadata("int8"), input_scale=(1.0, 2.0, 8.0))
    assert good.format == 2 and PolicyMetadata.from_json(good.to_json()) == good
    assert pendulum_metadata("fp32").format == 1  # what runtimes before scales read
    assert b"input_scale" not in pendulum_metadata("fp32").to_json()
    for bad in ([1.0, 2.0], [1.0, 0.0, 2.0], [1.0, "x", 2.0], None):
        doc = good.to_json().replace(b"[1.0, 2.0, 8.0]", json.dumps(bad).encode())
        with pytest.raises(PolicyFileError, match="input scales"):
            PolicyMetadata.from_json(doc)
    with pytest.raises(PolicyFileError, match="format 3"):
        PolicyMetadata.from_json(good.to_json().replace(b'"format": 2', b'"format": 3'))


def test_litert_and_tflite_runtime_pick_the_same_actions(cartpole, litert):
    pytest.importorskip("tflite_runtime.interpreter")
    _, _, test, files = cartpole
    a = Policy(files["int8"], runtime=litert)
    b = Policy(files["int8"], runtime=load_runtime("tflite_runtime"))
    assert compare_policies(a, b, test)["agreement"] >= 0.99


# -- corrupt files -----------------------------------------------------------------------------


def _runtimes():
    names = []
    for name in ("ai_edge_litert", "tflite_runtime"):
        try:
            load_runtime(name)
            names.append(name)
        except UserError:
            pass
    return names


def _assert_policy_file_error(data, runtime):
    with pytest.raises(PolicyFileError) as caught:
        Policy(data, runtime=runtime)
    assert isinstance(caught.value, UserError)
    message = str(caught.value)
    assert message and "\n" not in message


@pytest.mark.parametrize("runtime_name", _runtimes())
@pytest.mark.parametrize("damage", ["half", "random", "no_metadata", "empty", "every_length"])
def test_damaged_files_raise_policy_file_error(damage, runtime_name, cartpole):
    runtime = load_runtime(runtime_name)
    flat = cartpole[3]["int8"]
    if damage == "every_length":
        # tflite-runtime 2.14 does not verify models: a truncated file must never reach it
        for length in range(0, len(flat), 3):
            _assert_policy_file_error(flat[:length], runtime)
        return
    data = {
        "half": flat[: len(flat) // 2],
        "random": np.random.default_rng(0).integers(0, 256, len(flat), np.uint8).tobytes(),
        "no_metadata": _strip_edge_rl_metadata(flat),
        "empty": b"",
    }[damage]
    _assert_policy_file_error(data, runtime)


def test_a_tflite_file_without_edge_rl_metadata_says_so(cartpole, litert):
    with pytest.raises(PolicyFileError, match="no edge-rl policy metadata"):
        Policy(_strip_edge_rl_metadata(cartpole[3]["fp32"]), runtime=litert)


def _strip_edge_rl_metadata(flat):
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(flat))
    model.metadata = [m for m in model.metadata if m.name.decode() != METADATA_NAME]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))
