"""An algorithm defined outside edge-rl (tests/support/fitted_q.py), registered through
edge_rl.agents.register, runs the whole way: training with int8 actors, export, evaluation."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import EDGE_RL

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
ALGO = "support.fitted_q:fitted-q"


def run(*args, with_plugin: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if with_plugin:  # the module registering the algorithm is importable, as a user's would be
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return subprocess.run([EDGE_RL, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=900)


def test_a_registered_algorithm_trains_exports_and_evaluates(tmp_path):
    out = tmp_path / "run"
    # lockstep: the run, hence the network the int8 export check judges, is the same under
    # any load on the machine
    trained = run("train", "--algo", ALGO, "--env", "CartPole-v1", "--steps", "20000",
                  "--lockstep", "--seed", "0", "--out", out, "--no-carbon")
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algo"] == ALGO and summary["precision"] == "int8"
    # an untrained greedy CartPole policy falls in ~9 steps, a random one in ~22
    assert summary["best_return"]["mean"] >= 100  # seed 0 reaches about 200

    exported = run("export", out, "--int8", "--verify-episodes", "5")
    assert exported.returncode == 0, exported.stderr[-3000:]
    policy = out / "policy-int8.tflite"
    # the device side needs nothing of the algorithm: no plugin on the path
    evaluated = run("eval", policy, "--episodes", "10", with_plugin=False)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert float(evaluated.stdout.split("return:")[1].split()[0]) >= 60

    # without the module, the algorithm is unknown, in one line
    missing = run("export", out, "--int8", with_plugin=False)
    assert missing.returncode == 2 and "cannot import 'support.fitted_q'" in missing.stderr


def test_no_module_of_edge_rl_names_the_plugin():
    root = TESTS.parent
    sources = [*(root / "edge_rl").rglob("*.py"), *(root / "device").rglob("*.py"),
               *(root / "converters").rglob("*.py")]
    assert sources and not [p for p in sources if "fitted" in p.read_text().lower()]


def listed_flags(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """`edge-rl algorithms`' output as {(algorithm, "sets", "on images" or "sparse (...)"):
    {flag: value}}."""
    blocks: dict[tuple[str, str], dict[str, str]] = {}
    algorithm, current = "", None
    for line in text.splitlines():
        if not line.startswith(" "):
            algorithm, current = line.split(" (")[0], None
            continue
        if line.startswith(("  sets: ", "  on images: ", "  sparse (--sparsity, --tiny): ")):
            heading, line = line.strip().split(": ", 1)
            current = blocks.setdefault((algorithm, heading), {})
        elif not line.startswith("   "):  # an option of the algorithm's own
            current = None
        if current is not None:
            current.update(flag.split("=", 1) for flag in line.split())
    return blocks


def test_algorithms_lists_the_flags_each_sets_a_registered_one_too():
    """`edge-rl algorithms` shows what an algorithm sets that `edge-rl train` would otherwise
    leave to the user (learning rate, updates per step, ...), and what it sets on images, as
    flags train takes; a registered algorithm's as well."""
    listed = run("algorithms", "dqn", "td3", ALGO)
    assert listed.returncode == 0, listed.stderr[-3000:]
    blocks = listed_flags(listed.stdout)
    dqn = blocks[("dqn", "sets")]
    assert dqn["--hidden"] == "256,256" and dqn["--updates-per-step"] == "0.25", dqn
    assert dqn["--average-tau"] == "0.0002" and dqn["--nstep"] == "3", dqn
    images = blocks[("dqn", "on images")]
    assert images["--nstep"] == "1" and images["--atoms"] == "0", images
    assert images["--hidden"] == "64,64", images  # the width docs/pixels.md measured
    # what a sparse run of dqn resolves differently (test_weight_average.py pins the resolving)
    sparse = blocks[("dqn", "sparse (--sparsity, --tiny)")]
    assert sparse == {"--average-tau": "0.0"}, sparse
    assert ("td3", "sets") in blocks and ("td3", "on images") not in blocks, blocks
    assert ("td3", "sparse (--sparsity, --tiny)") not in blocks, blocks  # it sets no average
    assert blocks[("fitted-q", "sets")]["--learning-rate"] == "0.0005", blocks
    # each flag is one of `edge-rl train`'s or, like --atoms, of the algorithm's own options
    train_help = run("train", "--help").stdout
    takes = set(re.findall(r"^\s+(--[a-z0-9-]+)", train_help + listed.stdout, re.MULTILINE))
    flags = {flag for block in blocks.values() for flag in block}
    assert {"--hidden", "--atoms"} <= takes and flags <= takes, flags - takes
