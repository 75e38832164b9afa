"""The DeepMind Control Suite through shimmy ([dmc] extra), and D4PG on it end to end."""

import subprocess
import sys

import numpy as np
import pytest
from conftest import edge_rl, train

from edge_rl.device.envs import describe_env, make_env
from edge_rl.device.errors import UserError

CARTPOLE = "dm_control/cartpole-balance-v0"


def test_control_suite_observations_come_flattened_and_episodes_are_truncated():
    observation, action = describe_env(CARTPOLE)
    assert observation.shape == (5,)  # position (3) then velocity (2), the task's own order
    assert action == {"kind": "continuous", "shape": [1], "low": [-1.0], "high": [1.0]}
    assert describe_env("dm_control/walker-stand-v0")[0].shape == (24,)

    first, second = make_env(CARTPOLE, seed=4), make_env(CARTPOLE, seed=4)
    obs, _ = first.reset(seed=4)
    assert obs.shape == (5,) and np.array_equal(obs, second.reset(seed=4)[0])
    # A Control Suite episode is 1000 steps and ends by time, not by failure: truncated, so
    # the learner bootstraps from its last state.
    steps, terminated, truncated = 0, False, False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, _ = first.step(np.zeros(1, np.float32))
        steps += 1
        assert 0.0 <= float(reward) <= 1.0
    assert (steps, terminated, truncated) == (1000, False, True)


def test_without_the_extra_the_error_says_what_to_install(monkeypatch, cartpole_policy):
    monkeypatch.setitem(sys.modules, "shimmy", None)  # as if shimmy were not installed
    with pytest.raises(UserError, match=r"pip install 'edge-rl\[dmc\]'"):
        make_env(CARTPOLE)
    # the command, in its own process without shimmy, on a real policy file: the env is what
    # fails, with one line
    without_shimmy = ("import sys; sys.modules['shimmy'] = None; from edge_rl.cli import main; "
                      f"sys.argv = ['edge-rl', 'eval', {str(cartpole_policy)!r}, '--env', "
                      f"{CARTPOLE!r}]; main()")
    result = subprocess.run([sys.executable, "-c", without_shimmy], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    ours = [line for line in result.stderr.splitlines() if line.startswith("edge-rl:")]
    assert len(ours) == 1 and "pip install 'edge-rl[dmc]'" in ours[0], result.stderr


@pytest.mark.slow
def test_d4pg_on_the_control_suite_resumes_exports_evaluates_and_reports(tmp_path):
    """Int8 actors in their own processes run the Control Suite env; the run's checkpoint
    restores the same weights; its export and the device runtime's eval work on it. Lockstep,
    so no batch arrives after the last update: the int8 policy is calibrated on the replay's
    observations, and one more batch there would change it."""
    from edge_rl.analysis.report import build_report, env_filename
    from edge_rl.config import TrainConfig
    from edge_rl.loop.train import Training

    out = tmp_path / "run"
    first = train(out, "--algo", "d4pg", "--env", CARTPOLE, "--lockstep", "--steps", "3000",
                  "--warmup-steps", "1000", "--hidden", "32,32", "--batch-size", "64",
                  "--eval-every", "1500", "--eval-episodes", "1", "--publish-every", "500",
                  "--seed", "0")
    assert (first["algo"], first["env"], first["precision"]) == ("d4pg", CARTPOLE, "int8")
    assert first["updates"] > 500 and first["policies_published"] >= 1
    assert first["energy"]["joules"] > 0
    assert first["time_breakdown"]["actors"]["inference"] > 0
    assert "ai_edge_litert" in (out / "logs" / "actor-0.log").read_text()

    config = TrainConfig.load(out / "config.json").replace(steps=4000)
    resumed = Training(config, resume=True)
    assert (resumed.state.env_steps, resumed.learner.updates) == (first["steps"],
                                                                  first["updates"])
    # the same weights give the same int8 policy, hence the same greedy return
    assert resumed.evaluate_now().mean == first["final_return"]["mean"]

    exported = tmp_path / "p8.tflite"
    result = edge_rl("export", out, "--int8", "-o", exported, "--verify-episodes", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    verified = float(result.stdout.split("greedy return (int8): ")[1].split()[0])
    result = edge_rl("eval", exported, "--episodes", "1")  # the env id comes from the file
    assert result.returncode == 0, result.stderr[-3000:]
    # the same file on the same reset seed: the device runtime's return is the one the export
    # verified (a free-running 1000-step episode, no edge-rl code between env and file)
    assert float(result.stdout.split("return: ")[1].split()[0]) == pytest.approx(verified,
                                                                                 abs=0.01)

    report = tmp_path / "report"
    build_report([out], report)
    assert "d4pg int8" in (report / "report.md").read_text()
    assert (report / f"returns_vs_time_{env_filename(CARTPOLE)}.png").stat().st_size > 1000
