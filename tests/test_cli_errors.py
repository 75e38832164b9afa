"""User mistakes: one line on stderr, exit code 2, no traceback."""

import pytest
from conftest import edge_rl

from edge_rl.device.policy_file import pack_policy


def check_one_line_error(result, fragment):
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("edge-rl: error:")]
    assert len(lines) == 1, result.stderr[-2000:]
    assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["train", "--env", "NoSuchEnv-v0"], "cannot make env 'NoSuchEnv-v0'"),
        (["train", "--env", "no_such_package.envs:Thing-v0"], "cannot make env"),
        (["train", "--algo", "td3"], "td3 cannot drive CartPole-v1"),
        (["train", "--algo", "ppo"], "unknown algorithm 'ppo'"),
        (["train", "--steps", "0"], "--steps must be positive"),
        (["train", "--lockstep", "--actors", "2"], "--lockstep runs exactly one actor"),
        (["train", "--resume"], "--resume needs --out"),
        (["train", "--config", "/nonexistent/config.json"], "no config file"),
        # an algorithm's own options: declared, typed and checked by the algorithm
        (["train", "--algo", "td3", "--env", "Pendulum-v1", "--atoms", "5"],
         "No such option: --atoms (td3's own options: --tau"),
        (["train", "--replay-priority", "-1"], "--replay-priority must be in [0, 1]"),
        (["train", "--sparsity", "1.5"], "--sparsity must be in [0, 1)"),
        (["train", "--sparsity", "0.9", "--drop-fraction", "2"], "--drop-fraction must be"),
        (["export", "/nonexistent/run", "--int8"], "no run directory"),
        (["export", "/nonexistent/run", "--int8", "--edgetpu", "-o", "p.tflite"],
         "-o names one file"),
        (["eval", "/nonexistent/policy.tflite"], "no policy file"),
        (["learner"], "needs a fixed --port"),
        (["learner", "--port", "50999", "--host", "0.0.0.0"], "without --token-file"),
        (["learner", "--port", "50999", "--token-file", "/nonexistent/token"],
         "cannot read token file"),
        (["learner", "--port", "50999", "--tls-cert", "c.pem"], "needs both --tls-cert"),
        (["actor", "--learner", "127.0.0.1:1", "--token-file", "/nonexistent/t"],
         "cannot read token file"),
        (["actor", "--learner", "127.0.0.1:1", "--spool-max-mb", "0"], "must be positive"),
        (["actor", "--learner", "127.0.0.1:1", "--reconnect-max", "0"],
         "--reconnect-max must be positive"),
        (["status", "127.0.0.1:1"], "UNAVAILABLE"),
    ],
)
def test_bad_requests(args, fragment, tmp_path):
    # a request let through would run (an actor retries its learner for ever): fail it soon
    check_one_line_error(edge_rl(*args, cwd=tmp_path, timeout=120), fragment)


# Requests only the algorithm can answer: each loads TensorFlow (~5 s of CPU time on a small
# machine) before its error. The two above of this kind run in processes of their own, which
# shows that TensorFlow's import leaves the error one line; these run through the same entry
# point, edge_rl.cli.main, one after another in one process.
ANSWERED_BY_THE_ALGORITHM = [
    (["train", "--algo", "dqn", "--env", "Pendulum-v1"], "dqn cannot drive Pendulum-v1"),
    (["train", "--no-such-flag"], "No such option"),
    (["train", "--algo", "d4pg", "--env", "Pendulum-v1", "--atoms", "1"],
     "--atoms must be an integer >= 2"),
    (["train", "--algo", "d4pg", "--env", "Pendulum-v1", "--v-min", "abc"],
     "--v-min takes float, not 'abc'"),
    (["train", "--epsilon-end", "2"], "--epsilon-start and --epsilon-end must be in [0, 1]"),
    (["train", "--algo", "sac", "--env", "Pendulum-v1", "--actor-precision", "tf-fp32"],
     "cannot run sac's policy"),
    (["train", "--algo", "td3", "--env", "Pendulum-v1", "--replay-priority", "0.6"],
     "--replay-priority needs TD errors from the updates, which td3 does not report"),
    (["train", "--topology", "set"], "--topology set needs --sparsity"),
    (["train", "--topology", "dense", "--sparsity", "0.9"], "trains dense networks"),
    (["train", "--tiny"], "--tiny needs --sparsity"),
]
# A request let through would train: after LET_THROUGH_SECONDS it gets a Ctrl-C (the run stops
# as a user's would), and only its own case fails.
LET_THROUGH_SECONDS = 60
ONE_PROCESS = """
import contextlib, io, json, signal, sys
from edge_rl.cli import main
signal.signal(signal.SIGALRM, lambda signum, frame: signal.raise_signal(signal.SIGINT))
requests, seconds, answers = json.loads(sys.argv[1]), int(sys.argv[2]), []
for args in requests:
    sys.argv, stderr, code = ["edge-rl", *args], io.StringIO(), 0
    with contextlib.redirect_stderr(stderr):
        signal.alarm(seconds)
        try:
            main()
        except SystemExit as done:
            code = done.code
        except KeyboardInterrupt:
            code = "let through, stopped by Ctrl-C"
        finally:
            signal.alarm(0)
    answers.append([code, stderr.getvalue()])
print(json.dumps(answers))
"""


@pytest.fixture(scope="module")
def algorithm_answers(tmp_path_factory) -> list:
    """(exit code, stderr) of each request of ANSWERED_BY_THE_ALGORITHM, in one process."""
    import json
    import subprocess
    import sys

    requests = json.dumps([args for args, _ in ANSWERED_BY_THE_ALGORITHM])
    done = subprocess.run([sys.executable, "-c", ONE_PROCESS, requests, str(LET_THROUGH_SECONDS)],
                          capture_output=True, text=True, timeout=300,
                          cwd=tmp_path_factory.mktemp("requests"))
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("case", range(len(ANSWERED_BY_THE_ALGORITHM)),
                         ids=[fragment for _, fragment in ANSWERED_BY_THE_ALGORITHM])
def test_bad_requests_the_algorithm_answers(case, algorithm_answers):
    from types import SimpleNamespace

    code, stderr = algorithm_answers[case]
    fragment = ANSWERED_BY_THE_ALGORITHM[case][1]
    check_one_line_error(SimpleNamespace(returncode=code, stderr=stderr), fragment)


def test_export_of_a_run_without_an_evaluated_policy(tmp_path):
    (tmp_path / "run").mkdir()
    check_one_line_error(edge_rl("export", tmp_path / "run", "--int8"), "no evaluated policy")


def test_corrupt_and_truncated_policy_files(cartpole_policy, tmp_path):
    data = cartpole_policy.read_bytes()
    cases = {
        "random.tflite": bytes(range(256)) * 20,
        "truncated.tflite": data[: len(data) // 2],
        "empty.tflite": b"",
        "corrupt.tflite.xz": pack_policy(data)[:40] + bytes(200),
        "truncated.tflite.xz": pack_policy(data)[:-20],
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        result = edge_rl("eval", path, "--episodes", "1")
        assert result.returncode == 2 and "Traceback" not in result.stderr, (name, result.stderr)
        assert result.stderr.strip().splitlines()[-1].startswith("edge-rl: error:"), name


def test_policy_for_a_different_env(cartpole_policy):
    result = edge_rl("eval", cartpole_policy, "--env", "Pendulum-v1", "--episodes", "1")
    check_one_line_error(result, "made for CartPole-v1")


def test_eval_runs_a_policy_and_names_its_runtime(cartpole_policy):
    result = edge_rl("eval", cartpole_policy, "--episodes", "2")
    assert result.returncode == 0, result.stderr
    assert "runtime: ai_edge_litert" in result.stdout
    assert "over 2 episodes" in result.stdout
    result = edge_rl("eval", cartpole_policy, "--episodes", "2", "--runtime", "tflite_runtime")
    assert result.returncode == 0, result.stderr
    assert "runtime: tflite_runtime" in result.stdout


def test_eval_runs_an_xz_packed_policy(cartpole_policy, tmp_path):
    packed = tmp_path / "cartpole.tflite.xz"
    packed.write_bytes(pack_policy(cartpole_policy.read_bytes()))
    plain = edge_rl("eval", cartpole_policy, "--episodes", "2")
    result = edge_rl("eval", packed, "--episodes", "2")
    assert result.returncode == 0, result.stderr
    def mean_return(stdout):
        return stdout.split("return:")[1].split()[0]

    assert mean_return(result.stdout) == mean_return(plain.stdout)


def test_observations_no_kind_takes_are_refused_in_one_line(tmp_path):
    """A clip of frames (rank 4) has no observation kind: one line and exit 2, not a traceback
    from deep inside TF-Agents."""
    import os
    import subprocess
    from pathlib import Path

    from conftest import EDGE_RL

    tests = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tests), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([EDGE_RL, "train", "--out", str(tmp_path / "run"), "--env",
                             "support.image_env:Clips-v0"],
                            capture_output=True, text=True, env=env, timeout=300)
    check_one_line_error(result, "is not supported")
    assert "(2, 42, 42, 3)" in result.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_flags_no_run_can_take_are_refused_before_tensorflow_loads():
    """A typo in a flag or an env id is answered before the algorithm's import loads
    TensorFlow (seconds on a small machine): the same one-line error, from the config's own
    check or the env's."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from edge_rl.config import TrainConfig\n"
            "from edge_rl.device.errors import UserError\n"
            "from edge_rl.loop.train import prepare\n"
            "for bad in ({'steps': 0}, {'lockstep': True, 'actors': 2}, {'sparsity': 1.5},\n"
            "            {'env': 'CartPol-v1'}):\n"
            "    try:\n"
            "        prepare(TrainConfig(**bad))\n"
            "    except UserError as err:\n"
            "        print(err)\n"
            "print('tensorflow' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines[:3]] == ["--steps", "--lockstep", "--sparsity"]
    assert lines[3].startswith("cannot make env 'CartPol-v1'"), result.stdout
    assert lines[4] == "False", result.stdout


# Fields whose None a resolved run keeps, because None means something there (no target, no
# token file, the critic as the actor, the world-average grid, no RLx2 delay without --rlx2,
# ...). Any other field at None would be skipped by validate() after resolution too: a new field
# must be resolved or listed.
NONE_MEANS_SOMETHING = {"out", "target_return", "token_file", "tls_cert", "tls_key",
                        "critic_sparsity", "critic_hidden", "country", "nstep_delay"}


@pytest.mark.parametrize("algo, env", [("dqn", "CartPole-v1"), ("td3", "Pendulum-v1"),
                                       ("sac", "Pendulum-v1"), ("d4pg", "Pendulum-v1")])
@pytest.mark.parametrize("rlx2", [False, True])
def test_resolution_leaves_no_field_for_validate_to_skip(algo, env, rlx2):
    """validate() passes fields at None (before the algorithm's defaults are known); once
    resolved, only fields whose None is a setting may still be None, so the second call checks
    every other one."""
    import dataclasses

    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig
    from edge_rl.device.envs import describe_env

    observation, action = describe_env(env)
    given = TrainConfig(env=env, algo=algo, rlx2=rlx2, sparsity=0.9 if rlx2 else 0.0)
    config = resolve_defaults(get_algorithm(algo), given, observation, action)
    config.validate()
    still_none = {f.name for f in dataclasses.fields(config) if getattr(config, f.name) is None}
    assert still_none <= NONE_MEANS_SOMETHING, still_none - NONE_MEANS_SOMETHING
