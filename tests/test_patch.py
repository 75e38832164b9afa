"""Patched broadcasts: a policy written by PolicyPatcher equals a fresh conversion."""

from dataclasses import replace

import numpy as np
import pytest
from test_converter import recorded_observations

from edge_rl.agents import get_algorithm
from edge_rl.algorithm import resolve_defaults
from edge_rl.config import TrainConfig
from edge_rl.converters import convert, patch
from edge_rl.converters.int8_weights import corrected_bias, covered_range, symmetric_int8
from edge_rl.converters.patch import NotPatchable, PolicyPatcher
from edge_rl.device import Policy, PolicyMetadata
from edge_rl.device.envs import describe_env
from edge_rl.tf_setup import tf

CASES = {  # the exported networks of the three algorithms, on envs of their kind
    "dqn": "CartPole-v1",  # dueling trunk + centered advantages (MEAN, SUB)
    "td3": "HalfCheetah-v5",  # tanh scaled to the bounds (TANH, ADD, MUL)
    "sac": "Pendulum-v1",  # mean and log-std head
    # frames: uint8 in, a convolution (its 1/255 folded into the weights), a reshape
    "dqn-frames": "EdgeRL/BrightPatch-v0",
    # frames into an actor that reads its critic's encoder (agents/parts/networks)
    "td3-frames": "EdgeRL/BrightPatchPoint-v0",
    "sac-frames": "EdgeRL/BrightPatchPoint-v0",
    # frames calibrated on dim ones (as Pong's, whose brightest pixel is below 255): the file's
    # input range [0, 255] is wider than the calibrated one, so the converter's first biases
    # are rounded twice (converters.flatbuffer.integer_input)
    "dqn-frames-dim": "EdgeRL/BrightPatch-v0",
}


def calibration_frames(case: str, n: int, seed: int) -> np.ndarray:
    """Observations to calibrate `case` on: recorded ones, dimmed for a "-dim" case."""
    rows = recorded_observations(CASES[case], n, seed)
    return np.floor(rows * 0.8) if case.endswith("-dim") else rows


def exported_network(case: str):
    env = CASES[case]
    algo = case.split("-")[0]
    factory = get_algorithm(algo)
    observation, action = describe_env(env)
    config = resolve_defaults(factory, TrainConfig(env=env, algo=algo, hidden=(64, 64)),
                              observation, action)
    tf.keras.utils.set_random_seed(0)
    built = factory.build(observation, action, config)
    meta = PolicyMetadata(env_id=env, algo=algo, precision="int8", output=built.output_kind,
                          observation_shape=observation.shape, action=action,
                          observation=observation.kind.name)
    return built.export_model, meta


def train_a_little(layers, rng: np.random.Generator) -> None:
    """Move every weight, as updates would (biases leave zero too)."""
    for layer in layers:
        layer.set_weights([w + rng.normal(scale=0.05, size=w.shape).astype(np.float32)
                           for w in layer.get_weights()])


@pytest.mark.parametrize("algo,precision", [("dqn", "int8"), ("td3", "int8"), ("sac", "int8"),
                                            ("td3", "fp16"), ("dqn", "fp32"),
                                            ("dqn-frames", "int8"), ("dqn-frames", "fp16"),
                                            ("td3-frames", "int8"), ("sac-frames", "int8"),
                                            ("dqn-frames-dim", "int8")])
def test_patched_policy_matches_a_fresh_conversion(algo, precision, monkeypatch):
    # The converter's activation ranges are the calibrated values' min and max: so are the
    # patcher's when it covers all of them (it clips the rarest 0.1% by default); and the
    # converter keeps the rounded weights' mean error and one range for units of any width,
    # which the patcher corrects and balances by default.
    monkeypatch.setattr(patch, "COVERED_PERCENTILE", 100.0)
    monkeypatch.setattr(patch, "BIAS_CORRECTION", False)
    monkeypatch.setattr(patch, "BALANCE_FIRST_ACTIVATION", False)
    model, meta = exported_network(algo)
    meta = replace(meta, precision=precision)
    calibration = calibration_frames(algo, 500, seed=1)
    test = recorded_observations(CASES[algo], 1000, seed=2)
    patcher = PolicyPatcher(model, precision, calibration, meta)
    rng = np.random.default_rng(0)
    for version in (2, 3):
        train_a_little(patcher.layers, rng)
        new_meta = replace(meta, policy_version=version, train_step=1000 * version)
        # new observations each time: the int8 input scales follow them
        calibration = calibration_frames(algo, 500, seed=version + 2)
        patched = Policy(patcher.write(calibration, new_meta))
        fresh = Policy(convert(model, precision, calibration, new_meta))
        assert patched.metadata == fresh.metadata
        assert patched.metadata == new_meta  # raw observations in: no input scales
        gap = np.abs(patched.outputs(test) - fresh.outputs(test)).max()
        if precision == "int8":
            step = fresh.output_step
            assert step > 0
            assert gap <= step * 1.001 + 1e-6, f"{gap} is more than one output step {step}"
        else:
            assert gap <= 1e-6


def test_patching_keeps_the_models_weights_and_reflects_updates():
    model, meta = exported_network("td3")
    calibration = recorded_observations(CASES["td3"], 200, seed=1)
    before = [w.copy() for w in model.get_weights()]
    patcher = PolicyPatcher(model, "int8", calibration, meta)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
    first = Policy(patcher.write(calibration, meta)).outputs(calibration)
    train_a_little(patcher.layers, np.random.default_rng(1))
    second = Policy(patcher.write(calibration, meta)).outputs(calibration)
    assert np.abs(first - second).max() > 0.05  # the new weights are in the new file


def test_a_network_without_biases_is_not_patchable():
    inputs = tf.keras.Input((4,))
    outputs = tf.keras.layers.Dense(2, use_bias=False)(tf.keras.layers.Dense(8)(inputs))
    model = tf.keras.Model(inputs, outputs)
    meta = PolicyMetadata(env_id="CartPole-v1", algo="dqn", precision="fp32", output="q_values",
                          observation_shape=(4,), action={"kind": "discrete", "n": 2})
    with pytest.raises(NotPatchable):
        PolicyPatcher(model, "fp32", None, meta)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_a_layer_it_cannot_patch_is_refused_at_every_precision(precision):
    """A depthwise convolution's weights would ship as first converted in every broadcast:
    refused, so the learner converts in full (and says so) instead."""
    inputs = tf.keras.Input((8, 8, 1))
    hidden = tf.keras.layers.DepthwiseConv2D(3, activation="relu", name="conv")(inputs)
    outputs = tf.keras.layers.Dense(2)(tf.keras.layers.Flatten()(hidden))
    model = tf.keras.Model(inputs, outputs)
    meta = PolicyMetadata(env_id="Frames-v0", algo="dqn", precision=precision,
                          output="q_values", observation_shape=(8, 8, 1),
                          action={"kind": "discrete", "n": 2})
    calibration = np.random.default_rng(0).random((64, 8, 8, 1), np.float32)
    with pytest.raises(NotPatchable, match="conv: a DepthwiseConv2D layer"):
        PolicyPatcher(model, precision, calibration, meta)


@pytest.mark.parametrize("algo", ["td3", "dqn"])
def test_narrow_units_of_the_last_int8_layer_keep_their_precision(algo):
    """TF 2.15 gives an int8 FULLY_CONNECTED kernel one scale, so units whose weights are far
    narrower than the widest's (as pruning leaves a sparse layer's units) keep a few int8
    levels each. Here half the middle layer's units are made 30x narrower and the float layer
    after them 30x steeper on them: the same function. Scaled back (`scaled_units`), the int8
    file follows fp32 as closely as it does the unchanged network."""
    model, meta = exported_network(algo)
    calibration = recorded_observations(CASES[algo], 500, seed=1)
    test = recorded_observations(CASES[algo], 1000, seed=2)
    layers = [layer for layer in model.layers if type(layer) is tf.keras.layers.Dense]
    train_a_little(layers, np.random.default_rng(0))
    reference = Policy(convert(model, "fp32", None, replace(meta, precision="fp32")))

    def int8_error(scale_units: bool) -> float:
        patcher = PolicyPatcher(model, "int8", calibration, meta, scale_units=scale_units)
        assert patcher.scaled is not None and patcher.scaled[0] == len(layers) - 2
        policy = Policy(patcher.write(calibration, meta))
        return float(np.abs(policy.outputs(test) - reference.outputs(test)).mean())

    even = int8_error(scale_units=True)
    middle, after = layers[-2], layers[-1]
    (kernel, bias), (kernel_after, bias_after) = middle.get_weights(), after.get_weights()
    narrow = np.where(np.arange(kernel.shape[1]) % 2 == 0, 1 / 30, 1.0).astype(np.float32)
    middle.set_weights([kernel * narrow, bias * narrow])
    after.set_weights([kernel_after / narrow[:, None], bias_after])
    assert np.abs(reference.outputs(test) - Policy(convert(model, "fp32", None, replace(
        meta, precision="fp32"))).outputs(test)).max() < 1e-3  # the same function
    unscaled, scaled = int8_error(scale_units=False), int8_error(scale_units=True)
    assert scaled < 1.5 * even, (scaled, even)
    assert unscaled > 2 * scaled, (unscaled, scaled)


def test_activation_ranges_leave_the_rarest_values_out():
    """One value in 2000 far out does not stretch an activation's int8 grid."""
    values = np.concatenate([np.linspace(0.0, 1.0, 1999), [50.0]])
    low, high = covered_range(values, patch.COVERED_PERCENTILE)
    assert low == pytest.approx(0.001, abs=1e-3) and 0.99 < high < 1.1


def test_bias_correction_removes_the_rounded_weights_mean_error():
    rng = np.random.default_rng(3)
    kernel = rng.normal(size=(64, 16)).astype(np.float32)  # [inputs, units]
    bias = rng.normal(size=16).astype(np.float32)
    inputs = np.maximum(rng.normal(0.5, 1.0, size=(2000, 64)), 0.0)  # ReLU outputs
    q_weight, scale = symmetric_int8(kernel.T, per_channel=True)
    rounded = (q_weight * scale.reshape(-1, 1)).T.astype(np.float64)
    exact = inputs @ kernel + bias
    plain = inputs @ rounded + bias
    corrected = inputs @ rounded + corrected_bias(kernel, bias, q_weight, scale,
                                                   inputs.mean(axis=0))
    mean_error = np.abs((plain - exact).mean(axis=0))
    assert mean_error.max() > 0.01  # rounding 64 weights leaves a mean error worth correcting
    assert np.abs((corrected - exact).mean(axis=0)).max() < 1e-4 * mean_error.max() + 1e-5
