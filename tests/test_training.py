"""End to end: real learner, real actor processes, real gRPC on loopback, real LiteRT.

Small networks and budgets keep this file to a few minutes on 2 cores. Thresholds sit well
below what the fixed seeds reach (DQN lockstep is reproducible: seed 2 reaches 301 at 6k steps).
"""

import json

import pytest
from conftest import edge_rl, train

from edge_rl.converters import weight_dtypes
from edge_rl.device import load_policy
from edge_rl.device.evaluate import EVAL_SEED

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dqn") / "run"
    summary = train(out, "--lockstep", "--steps", "12000", "--eval-every", "2000",
                    "--publish-every", "500", "--target-return", "300", "--seed", "2",
                    "--updates-per-step", "1")
    return out, summary


def test_dqn_lockstep_int8_actors_learn_cartpole(dqn_run):
    out, summary = dqn_run
    assert summary["algo"] == "dqn" and summary["env"] == "CartPole-v1"
    assert summary["precision"] == "int8"
    assert summary["best_return"]["mean"] >= 195
    assert summary["best_return"]["episodes"] == 20
    assert summary["policies_published"] >= 3
    for name in ("config.json", "policy.tflite", "summary.json", "checkpoints/latest"):
        assert (out / name).exists(), name
    assert list((out / "tb").glob("events.out.tfevents.*"))
    # nothing dropped: every batch the actor numbered is in the ledger, without gaps
    checkpoint = (out / "checkpoints" / (out / "checkpoints/latest").read_text().strip())
    ledger = json.loads((checkpoint / "state.json").read_text())["ledger"]
    assert ledger == {"local-0": [[0, summary["steps"] // 64]]}
    policy = load_policy(out / "policy.tflite")
    assert policy.metadata.precision == "int8" and policy.metadata.env_id == "CartPole-v1"
    assert policy.metadata.policy_version == summary["best_return"]["policy_version"]
    # int8 weights, but for the first layer's: float32, fed the raw observation
    assert weight_dtypes(policy.model) == {"int8", "float32"}


def test_default_dqn_solves_cartpole_and_stays_solved_late(tmp_path):
    """`edge-rl train`'s defaults (DQN, its C51 network on vectors, CartPole-v1, 100k steps), in
    lockstep, seed 0: it solves CartPole (a greedy evaluation at 475, gymnasium's threshold, or
    more) and in the run's last quarter (from 75k steps) at least 80% of the evaluations do:
    issue 20's bar for a policy that stays learned.

    A lockstep run is the same run for a seed on one kind of CPU only, since TensorFlow picks
    its kernels by the processor. With the dueling network this run's last quarter held on some
    kinds of CPU and not on others (docs/learning.md); with C51 it scored 499-500 on all 11
    evaluations from 75k on a Zen 5 AMD EPYC, and 29 of 30 asynchronous runs there held the bar
    over the whole run after first solving it; evaluating the average of the weights (the
    default since 2026-12-05), 499.8-500 on all 11, and 20 of 20 asynchronous runs held. With
    the 256x256 network (the default on vectors since 2026-12-06), on an Intel Xeon (Ice Lake):
    475 first at 35k, 500 on all 11 evaluations from 75k."""
    summary = train(tmp_path / "run", "--lockstep", "--seed", "0", "--no-carbon")
    means = [evaluation["mean"] for evaluation in summary["evaluations"]]
    last_quarter = [evaluation["mean"] for evaluation in summary["evaluations"]
                    if evaluation["env_steps"] >= 75_000]
    assert len(last_quarter) >= 10, means
    assert summary["best_return"]["mean"] >= 475, means
    assert sum(mean >= 475 for mean in last_quarter) >= 0.8 * len(last_quarter), means


def test_a_run_traces_its_update_loop_once_and_notes_its_start(dqn_run):
    """Chunks of 64, 52 and 12 updates (the publish points split them) share one trace of the
    update loop; each trace cost seconds of the run's start (two were made before)."""
    _, summary = dqn_run
    startup = summary["startup"]
    assert len(startup["update_traces"]) == 1, startup
    order = ("training_start", "agent_built", "actors_started", "first_policy", "first_update",
             "first_evaluation")
    times = [startup[event] for event in order]
    assert times == sorted(times) and 0 < times[0], startup


def test_eval_of_the_exported_policy_confirms_the_return(dqn_run):
    out, summary = dqn_run
    result = edge_rl("eval", out / "policy.tflite", "--episodes", "20")
    assert result.returncode == 0, result.stderr
    mean = float(result.stdout.split("return: ")[1].split()[0])
    assert mean == pytest.approx(summary["best_return"]["mean"], abs=1e-6)


def test_the_summary_gives_the_kept_policy_on_other_episodes(dqn_run):
    """The best of a run's evaluations, all on the same episodes, flatters the policy it keeps;
    the summary also gives that policy's return on as many episodes from other seeds, which
    `edge-rl eval --seed` repeats."""
    out, summary = dqn_run
    best, heldout = summary["best_return"], summary["best_return_heldout"]
    assert heldout["episodes"] == best["episodes"] == 20, heldout
    assert heldout["policy_version"] == best["policy_version"], heldout
    assert abs(heldout["seed"] - EVAL_SEED) >= heldout["episodes"], heldout  # none in common
    result = edge_rl("eval", out / "policy.tflite", "--episodes", "20", "--seed",
                     heldout["seed"])
    assert result.returncode == 0, result.stderr
    mean = float(result.stdout.split("return: ")[1].split()[0])
    assert mean == pytest.approx(heldout["mean"], abs=1e-6)


def test_export_int8_agrees_with_fp32_and_fp16_has_float16_weights(dqn_run, tmp_path):
    out, _ = dqn_run
    target = tmp_path / "p8.tflite"
    result = edge_rl("export", out, "--int8", "-o", target, "--verify-episodes", "3")
    if result.returncode:  # refused: one line naming the gap, nothing written
        assert result.returncode == 1, result.stderr
        complaint = result.stderr.strip().splitlines()[-1]
        assert complaint.startswith("edge-rl: error: int8 policy refused, nothing written: ")
        assert "Traceback" not in result.stderr and not target.exists()
        result = edge_rl("export", out, "--int8", "-o", target, "--verify-episodes", "3",
                         "--force")
        assert result.returncode == 0, result.stderr
        assert "warning: written with --force" in result.stdout
    agreement = float(result.stdout.split("agree on ")[1].split("%")[0])
    decisive = float(result.stdout.split("and on ")[1].split("%")[0])
    # int8 flips near-ties: a DQN CartPole network's Q-value gap moves by about 0.1 to 0.2
    # with int8 rounding, and 5% of its states have gaps under 0.09. Where fp32's best action
    # leads by more than two output steps the two must agree (this seed-2 run: 95.4% overall,
    # 99.3% there).
    assert agreement >= 90.0, result.stdout
    assert decisive >= 99.0, result.stdout
    assert "greedy return (int8)" in result.stdout
    assert "int8" in weight_dtypes(target.read_bytes())

    result = edge_rl("export", out, "--fp16", "-o", tmp_path / "p16.tflite",
                     "--verify-episodes", "0")
    assert result.returncode == 0, result.stderr
    model = (tmp_path / "p16.tflite").read_bytes()
    assert "float16" in weight_dtypes(model)
    assert load_policy(tmp_path / "p16.tflite").metadata.precision == "fp16"


def test_resume_restores_steps_weights_and_policy_version(tmp_path):
    from edge_rl.config import TrainConfig
    from edge_rl.loop.train import Training

    out = tmp_path / "run"
    first = train(out, "--lockstep", "--steps", "3000", "--eval-every", "5000",
                  "--eval-episodes", "5", "--seed", "1")
    config = TrainConfig.load(out / "config.json").replace(steps=4500)
    resumed = Training(config, resume=True)
    assert resumed.state.env_steps == first["steps"]
    assert resumed.learner.updates == first["updates"]
    assert resumed.state.policy_version == first["policies_published"]
    # the same weights give the same quantized policy, hence the same greedy return
    result = resumed.evaluate_now()
    assert result.mean == first["final_return"]["mean"]
    assert resumed.state.policy_version == first["policies_published"] + 1

    second = train(out, "--resume", "--steps", "4500")
    assert second["steps"] >= 4500
    assert second["updates"] > first["updates"]
    assert second["final_return"]["policy_version"] > first["final_return"]["policy_version"]
    assert second["wall_clock_seconds"] > first["wall_clock_seconds"]
    # energy and time add up over the sessions
    assert second["energy"]["joules"] > first["energy"]["joules"] > 0
    assert (second["time_breakdown"]["learner"]["updates"]
            > first["time_breakdown"]["learner"]["updates"] > 0)


@pytest.mark.parametrize("algo, precision", [("td3", "int8"), ("sac", "int8"),
                                              ("d4pg", "int8"), ("td3", "tf-fp32")])
def test_continuous_control_beats_minus_400_on_pendulum(algo, precision, tmp_path):
    """tf-fp32: the framework baseline, whose actor acts with TF-Agents' own policy. D4PG's
    support covers Pendulum's returns (a 200-step episode costs between about -1600 and 0).
    The runs are in lockstep, hence reproducible whatever else shares the cores: free-running,
    a TD3 seed-0 run ended at -529 once, with the other pytest worker busy beside it (and
    D4PG's at -442 once in CI)."""
    out = tmp_path / algo
    d4pg_flags = ["--v-min", "-1600", "--v-max", "0"] if algo == "d4pg" else []
    summary = train(
        out, "--algo", algo, "--env", "Pendulum-v1", "--steps", "15000",
        "--hidden", "64,64", "--batch-size", "128", "--warmup-steps", "1000",
        "--learning-rate", "0.001", "--eval-every", "2500", "--eval-episodes", "10",
        "--publish-every", "1000", "--target-return", "-250", "--seed", "0",
        "--actor-precision", precision, "--lockstep", *d4pg_flags,
    )
    assert summary["best_return"]["mean"] > -400
    # flow control: the learner trails the samples-per-insert target (1 update per step after
    # 1000 warm-up steps) by at most max_update_lag plus the batches actors may have in flight
    assert summary["updates"] >= summary["steps"] - 1000 - 2000 - 4 * 64 - 64
    policy = load_policy(out / "policy.tflite")
    assert policy.metadata.output == ("squashed_gaussian" if algo == "sac" else "action")
    actor_log = (out / "logs" / "actor-0.log").read_text()
    if precision == "int8":
        assert "int8" in weight_dtypes(policy.model)
        assert "ai_edge_litert" in actor_log
    else:  # the learner keeps an fp32 policy file; its actor ran TF-Agents' SavedModel
        assert weight_dtypes(policy.model) == {"float32"}
        assert "SavedModelPyTFEagerPolicy" in actor_log
        assert summary["policy_bytes"] > 100_000  # the saved graph travels with the weights
