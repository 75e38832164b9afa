import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# One TensorFlow thread per kind in every process the tests start (the learners included, which
# inherit this): the suite runs two workers on two cores, each often with a learner training
# beside it, so a learner's second thread finds no free core. Alone, a TD3 update (256x256,
# batch 64) took 5.2 ms of CPU on one thread against 6.7 ms on two (and 1.4x the wall time);
# the whole suite took 1,551 CPU-seconds against 1,720 (2026-12-06).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")

EDGE_RL = str(Path(sys.executable).parent / "edge-rl")


# The files that take longest, longest first (CPU seconds, their processes' included, in a
# local run of the whole suite on 2026-12-06: 286, 117, 109, 103, 98, 97, 93, 56, 52, 46).
LONGEST_FILES = ("test_training.py", "test_tools.py", "test_sparse_training.py",
                 "test_differential.py", "test_pixel_envs.py", "test_pixel_actor_critic.py",
                 "test_netns_fleet.py", "test_fleet.py", "test_report_runs.py", "test_pixels.py")


def pytest_collection_modifyitems(items):
    """The longest files first, then the other files with slow tests, then the rest (each file's
    tests in their own order). The two xdist workers take whole files as they finish the last
    (`--dist loadfile --no-loadscope-reorder` in pyproject.toml), so they share the long files
    and both end on short ones; with xdist's default order (files with the most tests first) a
    one-test file of ~70 s ran alone at the end while the other worker sat idle."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item) -> tuple[int, int]:
        if item.path.name in LONGEST_FILES:
            return 0, LONGEST_FILES.index(item.path.name)
        return (1 if item.path in slow_files else 2), 0

    items.sort(key=rank)


def edge_rl(*args, cwd=None, timeout=900):
    """Run the installed `edge-rl` command in a real process."""
    return subprocess.run([EDGE_RL, *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def train(out, *args) -> dict:
    """`edge-rl train --out OUT ARGS` in a real process, which must succeed and publish by
    patching (edge_rl.converters.patch: every network edge-rl builds allows it); its
    summary.json."""
    result = edge_rl("train", "--out", out, *args)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "converted in full" not in result.stderr, result.stderr[-4000:]
    return json.loads((Path(out) / "summary.json").read_text())


def small_cartpole_network(precisions: tuple[str, ...], folder: Path) -> dict[str, Path]:
    """One small untrained CartPole Q-network (seed 0) converted at each of `precisions`."""
    from edge_rl.converters import convert
    from edge_rl.device.policy_file import PolicyMetadata
    from edge_rl.tf_setup import tf

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([
        tf.keras.Input((4,)),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(2),
    ])
    calibration = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
    paths = {}
    for precision in precisions:
        meta = PolicyMetadata(env_id="CartPole-v1", algo="dqn", precision=precision,
                              output="q_values", observation_shape=(4,),
                              action={"kind": "discrete", "n": 2})
        paths[precision] = folder / f"cartpole-{precision}.tflite"
        paths[precision].write_bytes(convert(model, precision, calibration, meta))
    return paths


@pytest.fixture(scope="session")
def cartpole_policy(tmp_path_factory) -> Path:
    """A small untrained int8 CartPole policy file, made by the converter."""
    return small_cartpole_network(("int8",), tmp_path_factory.mktemp("policy"))["int8"]


@pytest.fixture(scope="session")
def cartpole_grid_policies(tmp_path_factory) -> dict[str, Path]:
    """The same network as an --edgetpu file (int8 input: an input grid) and as fp32."""
    return small_cartpole_network(("edgetpu", "fp32"), tmp_path_factory.mktemp("grid"))
