"""An algorithm defined outside edge-rl (tests/support/fitted_q.py), registered through
edge_rl.agents.register, runs the whole way: training with int8 actors, export, evaluation."""

import json
import os
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
