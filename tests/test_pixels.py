"""Image observations end to end: a CNN learns EdgeRL/BrightPatch-v0 with int8 actors, frames
stay uint8 on the wire and in replay, and the policy files take the env's raw frames in any
TFLite runtime, at every precision, the Edge TPU's included."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import train
from test_differential import plain_interpreter

from edge_rl.device import bright_patch
from edge_rl.device.envs import make_env

ENV = bright_patch.ENV_ID
BEST_RETURN = bright_patch.EPISODE_STEPS  # one point a frame; guessing earns a quarter of it
LEARNED = 0.9 * BEST_RETURN
RUNTIMES = ("ai_edge_litert", "tflite_runtime", "tflite_micro")


def env_frames(n: int, seed: int, env_id: str = ENV) -> np.ndarray:
    """`n` frames of the env as a policy sees them, from random play."""
    env = make_env(env_id, seed=seed)
    frames = [env.reset(seed=seed)[0]]
    while len(frames) < n:
        frame, _, terminated, truncated, _ = env.step(env.action_space.sample())
        frames.append(env.reset()[0] if terminated or truncated else frame)
    return np.stack(frames)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pixels") / "run"
    train(out, "--env", ENV, "--steps", "15000", "--seed", "0")
    return out


def greedy_return(act, seed: int, env_id: str = ENV, episodes: int = 5) -> float:
    """Mean return of `act` (the env's raw frame -> its action) over `episodes` episodes."""
    env = make_env(env_id, seed=seed)
    total = 0.0
    for episode in range(episodes):
        frame, _ = env.reset(seed=seed * 100 + episode)
        done = False
        while not done:
            frame, reward, terminated, truncated, _ = env.step(act(frame))
            total += reward
            done = terminated or truncated
    return total / episodes


@pytest.mark.slow
def test_a_cnn_learns_bright_patch_with_int8_actors(run):
    summary = json.loads((run / "summary.json").read_text())
    config = json.loads((run / "config.json").read_text())
    assert config["actor_precision"] == "int8"
    assert summary["best_return"]["mean"] >= LEARNED, summary["evaluations"]
    assert summary["final_return"]["mean"] >= LEARNED, summary["evaluations"]


@pytest.mark.slow
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_shipped_file_plays_from_raw_frames_in_any_runtime(run, runtime):
    pytest.importorskip(runtime)
    model = (run / "policy.tflite").read_bytes()
    interpreter = importlib.import_module("ai_edge_litert.interpreter").Interpreter(
        model_content=model)
    assert interpreter.get_input_details()[0]["dtype"] == np.uint8  # frames as the env gives
    # the runner feeds the file's input dtype: uint8 frames as they are, no edge-rl code
    runner = plain_interpreter(runtime, model)
    returns = [greedy_return(lambda frame: int(np.argmax(runner(frame))), seed)
               for seed in (11, 12, 13)]  # seeds no run saw
    assert min(returns) >= LEARNED, returns


@pytest.mark.slow
def test_frames_stay_uint8_and_once_on_the_wire_and_in_replay(run):
    from edge_rl.device.wire import decode_batch, from_tensor
    from edge_rl.transport.replay_log import read_records

    frame = 16 * 16  # bytes
    for _, payload in read_records(run / "replay-log"):
        batch = decode_batch(payload)
        sent = {name: from_tensor(getattr(batch, name), name)
                for name in ("observation", "next_observation")}
        n = len(sent["next_observation"])
        assert all(f.dtype == np.uint8 and f.shape[1:] == (16, 16, 1) for f in sent.values())
        # every row's next frame, and a frame of its own only where a 16-frame episode starts
        # (or the batch does): not two frames a row, nor 4-byte floats
        assert len(sent["observation"]) <= n / 16 + 2
        assert len(payload) < (n + n / 16 + 2) * frame + 64 * n
    checkpoint = (run / "checkpoints" / "latest").read_text().strip()
    with np.load(run / "checkpoints" / checkpoint / "replay.npz") as replay:
        stored = len(replay["observation"])
        assert replay["observation"].dtype == np.uint8
        assert replay["observation"].shape[1:] == (16, 16, 1)
        assert "next_observation" not in replay
        # one frame a transition, plus one for each episode's last (and each open one's)
        assert len(replay["final_observations"]) <= stored / 16 + 2


def image_network(shape: tuple[int, ...], n_actions: int = 4):
    """DQN's exported network (trunk and advantage stream) for frames of `shape`."""
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig
    from edge_rl.device.observations import FRAMES, ObservationSpec

    observation = ObservationSpec(FRAMES, shape)
    action = {"kind": "discrete", "n": n_actions}
    factory = get_algorithm("dqn")
    config = resolve_defaults(factory, TrainConfig(algo="dqn", env=ENV), observation, action)
    return factory.build(observation, action, config).export_model, observation, action


def metadata(observation, action, precision):
    from edge_rl.device.policy_file import PolicyMetadata

    return PolicyMetadata(env_id=ENV, algo="dqn", precision=precision, output="q_values",
                          observation_shape=observation.shape, action=action,
                          observation=observation.kind.name)


def test_image_files_take_raw_frames_at_every_precision():
    """No CAST in any file (TFLite Micro's takes no uint8; the Edge TPU would run the graph on
    the CPU from it); int8 maps 0..255 onto its grid exactly, whatever the calibration saw."""
    from edge_rl.converters import convert
    from edge_rl.converters.flatbuffer import read_model
    from edge_rl.device.tflite_file import output_step
    from edge_rl.tf_setup import tf

    tf.keras.utils.set_random_seed(0)
    model, observation, action = image_network((16, 16, 1))
    frames = env_frames(300, seed=0)
    reference = model(frames).numpy()
    for precision in ("fp32", "fp16", "int8", "edgetpu"):
        flat = convert(model, precision, frames, metadata(observation, action, precision))
        graph = read_model(flat).subgraphs[0]
        interpreter = tf.lite.Interpreter(model_content=flat)
        ops = [op["op_name"] for op in interpreter._get_ops_details()]
        assert "CAST" not in ops, (precision, ops)
        source = interpreter.get_input_details()[0]
        assert source["dtype"] == np.uint8 and source["quantization"] == (1.0, 0), precision
        if precision in ("int8", "edgetpu"):
            assert ops[0] == "QUANTIZE"
            quantized = graph.tensors[int(graph.operators[0].outputs[0])].quantization
            assert (float(quantized.scale[0]), int(quantized.zeroPoint[0])) == (1.0, -128)
        if precision == "edgetpu":
            continue  # int8 output; its loading is checked below
        outputs = np.concatenate([plain_interpreter("ai_edge_litert", flat)(f)[None]
                                  for f in frames])
        tolerance = 1e-5 if precision == "fp32" else 1e-3
        if precision == "int8":
            tolerance = 3 * output_step(flat)
        np.testing.assert_allclose(outputs, reference, atol=tolerance, err_msg=precision)

    from edge_rl.device import Policy

    edgetpu = convert(model, "edgetpu", frames, metadata(observation, action, "edgetpu"))
    greedy = Policy(edgetpu).act(frames)
    assert np.mean(greedy == reference.argmax(axis=1)) >= 0.9


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_grayscale_frames_without_a_channel_axis_convert_and_patch(precision, monkeypatch):
    """Rank-2 frames (height, width): the network adds the channel axis itself, so the file
    takes the env's frames as they are, at any batch, and the patcher still writes it."""
    from dataclasses import replace

    from edge_rl.converters import convert, patch
    from edge_rl.converters.patch import PolicyPatcher
    from edge_rl.device import Policy
    from edge_rl.device.tflite_file import output_step
    from edge_rl.tf_setup import tf

    # the patcher's ranges as the converter's (as test_patch does)
    monkeypatch.setattr(patch, "COVERED_PERCENTILE", 100.0)
    monkeypatch.setattr(patch, "BIAS_CORRECTION", False)
    monkeypatch.setattr(patch, "BALANCE_FIRST_ACTIVATION", False)
    tf.keras.utils.set_random_seed(0)
    model, observation, action = image_network((16, 16))
    frames = env_frames(300, seed=0)[..., 0]
    meta = metadata(observation, action, precision)
    fresh = convert(model, precision, frames, meta)  # checks batches of 1 and more
    assert Policy(fresh).metadata.observation_shape == (16, 16)
    for runtime in RUNTIMES:  # the env's (16, 16) frames, as they are, in a plain runtime
        pytest.importorskip(runtime)
        plain = np.stack([plain_interpreter(runtime, fresh)(f) for f in frames[:20]])
        # int8 kernels round differently from one runtime to the next: an output step or two
        tolerance = 1e-5 if precision == "fp32" else 2 * output_step(fresh)
        np.testing.assert_allclose(plain, Policy(fresh).outputs(frames[:20]), atol=tolerance,
                                   err_msg=runtime)
    patched = PolicyPatcher(model, precision, frames, meta).write(
        frames, replace(meta, policy_version=2))
    gap = np.abs(Policy(patched).outputs(frames) - Policy(fresh).outputs(frames)).max()
    assert gap <= (output_step(fresh) * 1.001 if precision == "int8" else 1e-5)


def test_the_nature_cnn_converts_for_the_edge_tpu():
    """Atari-sized frames get the Nature DQN's three convolutions, and its int8 file meets
    the Edge TPU's rules (4-D filters are weights, not activations)."""
    from edge_rl.converters import convert
    from edge_rl.converters.edgetpu import edgetpu_problems
    from edge_rl.tf_setup import tf

    tf.keras.utils.set_random_seed(0)
    model, observation, action = image_network((84, 84, 4), n_actions=4)
    convs = [layer for layer in model.layers if isinstance(layer, tf.keras.layers.Conv2D)]
    assert [(c.filters, c.kernel_size[0], c.strides[0]) for c in convs] == [
        (32, 8, 4), (64, 4, 2), (64, 3, 1)]
    frames = np.random.default_rng(0).integers(0, 256, (64, 84, 84, 4)).astype(np.uint8)
    flat = convert(model, "edgetpu", frames, metadata(observation, action, "edgetpu"))
    assert edgetpu_problems(flat) == []
