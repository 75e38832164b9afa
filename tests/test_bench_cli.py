"""`edge-rl bench`: each subcommand runs for real on a small policy file in a process that
cannot import TensorFlow (tests/support/no_tensorflow on PYTHONPATH, which also reaches the
actor process that `bench footprint` starts), and user mistakes are one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import EDGE_RL

BLOCKER = Path(__file__).parent / "support" / "no_tensorflow"
REFUSED = "no-tensorflow: refused import of"
RUNTIMES = ("ai_edge_litert", "tflite_runtime")


def bench(*args, expect: int = 0) -> subprocess.CompletedProcess:
    """`edge-rl bench ARGS` with TensorFlow unimportable; it must exit `expect` without ever
    trying to import TensorFlow."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(BLOCKER), *filter(None, [os.environ.get("PYTHONPATH")])]))
    done = subprocess.run([EDGE_RL, "bench", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert REFUSED not in done.stderr, done.stderr
    assert done.returncode == expect, done.stderr[-3000:]
    return done


def error_lines(stderr: str) -> list[str]:
    """stderr without the runtime's own notice (LiteRT prints one when it loads a model)."""
    return [line for line in stderr.splitlines()
            if line.strip() and not line.startswith("INFO: Created TensorFlow Lite")]


def test_the_blocker_blocks():
    env = dict(os.environ, PYTHONPATH=str(BLOCKER))
    done = subprocess.run([Path(EDGE_RL).with_name("python"), "-c", "import tensorflow"],
                          capture_output=True, text=True, env=env)
    assert done.returncode != 0 and f"{REFUSED} tensorflow" in done.stderr


@pytest.mark.parametrize("command", [[], ["latency"], ["footprint"], ["input-quantization"]])
def test_help(command):
    out = bench(*command, "--help").stdout
    assert out.startswith("Usage: edge-rl bench")
    if not command:
        assert all(name in out for name in ("latency", "footprint", "input-quantization"))


def test_latency(cartpole_policy):
    figures = json.loads(bench("latency", cartpole_policy, "--invokes", "300", "--json").stdout)
    assert figures["runtime"].split()[0] in RUNTIMES
    assert figures["threads"] == 1 and figures["invokes"] == 300
    assert 0 < figures["min_us"] <= figures["median_us"] <= figures["p90_us"]
    assert figures["p90_us"] <= figures["p99_us"] <= figures["max_us"]
    assert figures["median_us"] < 1e6  # under a second an invoke
    assert figures["precision"] == "int8" and figures["env_id"] == "CartPole-v1"

    table = bench("latency", cartpole_policy, "--invokes", "50", "--threads", "2",
                  "--runtime", "tflite_runtime").stdout
    assert "tflite_runtime" in table and "2 threads" in table
    assert [line.split()[0] for line in table.splitlines()] == [
        "policy", "runtime", "invokes", "median", "p90", "p99", "mean"]


def test_footprint_with_a_stand_in_learner(cartpole_policy):
    """The actor is a real process; a target it misses exits 1, with the figures printed."""
    done = bench("footprint", cartpole_policy, "--steps", "300", "--max-rss-mb", "1", "--json",
                 expect=1)
    figures = json.loads(done.stdout)
    assert figures["env"] == "CartPole-v1" and figures["learner"] == "stand-in"
    assert 10 < figures["peak_rss_mb"] < 1000
    assert 0 < figures["first_action_s"] < figures["wall_s"]
    assert figures["steps_per_second"] > 0
    # batches of 64 transitions; what was not sent when the actor stopped stays in its spool
    assert 1 <= figures["batches_accepted"] <= 300 // 64
    assert figures["learner_updates"] is None
    assert error_lines(done.stderr)[-1].startswith("edge-rl: error: missed: peak RSS")


def test_footprint_of_an_image_actor(tmp_path):
    """Frames (uint8, sent once) reach the stand-in learner as a real learner takes them."""
    from test_pixels import image_network, metadata

    from edge_rl.converters import convert
    from edge_rl.tf_setup import tf

    tf.keras.utils.set_random_seed(0)
    model, observation, action = image_network((16, 16, 1))
    frames = np.random.default_rng(0).integers(0, 256, (64, 16, 16, 1)).astype(np.uint8)
    path = tmp_path / "frames.tflite"
    path.write_bytes(convert(model, "int8", frames, metadata(observation, action, "int8")))
    figures = json.loads(bench("footprint", path, "--steps", "300", "--json").stdout)
    assert figures["env"] == "EdgeRL/BrightPatch-v0"
    assert 1 <= figures["batches_accepted"] <= 300 // 64


def test_footprint_joins_a_running_learner(cartpole_policy):
    from edge_rl.device.bench_learner import StandInLearner, serve
    from edge_rl.device.policy import load_policy

    learner = StandInLearner(load_policy(cartpole_policy))
    server, port = serve(learner)
    try:
        out = bench("footprint", "--learner", f"127.0.0.1:{port}", "--steps", "200").stdout
    finally:
        server.stop(grace=None)
    header, row = out.splitlines()
    assert header.split()[:3] == ["env", "where", "learner"]
    assert row.split()[:3] == ["CartPole-v1", os.uname().machine, f"127.0.0.1:{port}"]
    batches, updates = map(int, row.split()[-2:])  # in its replay; a stand-in makes no updates
    assert 1 <= batches <= 200 // 64 and updates == 0
    assert sum(len(seqs) for seqs in learner.batches.values()) == batches


def test_input_quantization(cartpole_grid_policies):
    figures = json.loads(bench(
        "input-quantization", cartpole_grid_policies["edgetpu"], "--reference",
        cartpole_grid_policies["fp32"], "--steps", "300", "--json").stdout)
    assert figures["observations"] == 300 and figures["per_feature_scales"]
    assert figures["scale"] > 0 and -128 <= figures["zero_point"] <= 127
    assert len(figures["levels"]) == 4 and min(figures["levels"]) >= 1
    assert all(0 <= share <= 1 for share in figures["clipped"])
    assert set(figures["errors"]) == {"fp32 fed the int8 input grid", "the int8 policy"}
    # an untrained network: near-ties flip on a few rows, but most actions agree
    assert all(error["differing"] < 0.2 for error in figures["errors"].values())

    table = bench("input-quantization", cartpole_grid_policies["edgetpu"], "--steps", "100")
    assert "one a feature" not in table.stdout and "largest |x|" in table.stdout


@pytest.mark.parametrize("args, message", [
    (["latency", "missing.tflite"], "no policy file at missing.tflite"),
    (["latency", "{not_policy}"], "not a TFLite model"),
    (["latency", "{policy}", "--threads", "0"], "--threads must be at least 1"),
    (["footprint", "missing.tflite"], "no policy file at missing.tflite"),
    (["footprint"], "give either a POLICY_FILE"),
    (["footprint", "{not_policy}", "--steps", "0"], "--steps, --timeout and --wait must be"),
    (["footprint", "--learner", "127.0.0.1:9", "--wait", "1"], "did not answer with a policy"),
    (["input-quantization", "missing.tflite"], "no policy file at missing.tflite"),
    (["input-quantization", "{policy}"], "has no input grid"),
    (["input-quantization", "{grid}", "--env", "Pendulum-v1"], "made for CartPole-v1"),
])
def test_mistakes_are_one_line_and_exit_2(args, message, cartpole_policy,
                                          cartpole_grid_policies, tmp_path):
    not_policy = tmp_path / "notes.tflite"
    not_policy.write_text("not a policy\n")
    files = {"{policy}": cartpole_policy, "{not_policy}": not_policy,
             "{grid}": cartpole_grid_policies["edgetpu"]}
    done = bench(*[files.get(arg, arg) for arg in args], expect=2)
    lines = error_lines(done.stderr)
    assert len(lines) == 1 and lines[0].startswith("edge-rl: error: "), done.stderr
    assert message in lines[0]


def test_an_int8_input_quantized_by_its_first_operator(tmp_path, cartpole_policy):
    """int8 files made before 2026-11-23 (or whose network does not start with Dense) take a
    float32 input that a QUANTIZE op puts on the grid; later int8 files have no grid."""
    import numpy as np

    from edge_rl.converters import convert
    from edge_rl.device.policy import load_policy
    from edge_rl.device.policy_file import PolicyMetadata
    from edge_rl.tf_setup import tf

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Rescaling(2.0),
                                 tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    meta = PolicyMetadata(env_id="CartPole-v1", algo="dqn", precision="int8",
                          output="q_values", observation_shape=(4,),
                          action={"kind": "discrete", "n": 2})
    calibration = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
    path = tmp_path / "quantized-input.tflite"
    path.write_bytes(convert(model, "int8", calibration, meta))
    scale, zero_point = load_policy(path).input_quantization
    assert 0 < scale < 0.1 and -128 <= zero_point <= 127
    assert load_policy(cartpole_policy).input_quantization == (0.0, 0)

    figures = json.loads(bench("input-quantization", path, "--steps", "100", "--json").stdout)
    assert figures["scale"] == pytest.approx(scale) and not figures["per_feature_scales"]
