"""The differential test: exported policy files against fp32, run by LiteRT, tflite-runtime and
TensorFlow Lite Micro fed the env's own observations, with no edge-rl code between the env and
the interpreter.

Cases: small trained runs of every algorithm, dense and sparse (tests/data/differential, made
by tools/differential_cases.py), the two reproductions of reported export bugs, and two
free-running short runs trained here. Each is exported at every precision by `RunExport`
(what `edge-rl export` does), and the int8 file must hold the export tolerances
(edge_rl.converters.verify) against the fp32 file: on the run's held-out observations, and in
greedy episodes from fixed reset seeds, in each runtime.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from edge_rl.converters.verify import confirmed_return_gap, decisive_rows, tolerance_failures
from edge_rl.device.tflite_file import output_step

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


def _cases_tool():
    spec = importlib.util.spec_from_file_location("differential_cases",
                                                  REPO / "tools" / "differential_cases.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES_TOOL = _cases_tool()  # what made the shipped cases trains the free-running ones
FREE_RUNNING = sorted(CASES_TOOL.FREE_RUNNING)

CASES_DIR = Path(__file__).parent / "data" / "differential"
SHIPPED = sorted(p.name for p in CASES_DIR.iterdir() if (p / "config.json").is_file())

RUNTIMES = ("ai_edge_litert", "tflite_runtime", "tflite_micro")
EPISODES = 3
RESET_SEED = 7_000_000  # episodes start from seeds no run was evaluated on
HOLDOUT_ROWS = 1000


class Exports:
    """Each case's files at each precision, exported once (on first use) into a scratch run
    folder: the case's files are never written to."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.runs: dict[str, Path] = {}
        self.exporters: dict[str, object] = {}
        self.files: dict[tuple[str, str], Path] = {}
        self.reports: dict[tuple[str, str], list[str]] = {}

    def run(self, case: str) -> Path:
        if case not in self.runs:
            run_dir = self.scratch / case
            if case in FREE_RUNNING:
                CASES_TOOL.train_case(case, run_dir)
            else:
                shutil.copytree(CASES_DIR / case, run_dir)
            self.runs[case] = run_dir
        return self.runs[case]

    def exporter(self, case: str):
        """The case's RunExport (edge_rl.loop.export): what `edge-rl export` does, one precision
        after another on one loaded network."""
        if case not in self.exporters:
            from edge_rl.loop.export import RunExport

            self.exporters[case] = RunExport(self.run(case), verify_episodes=2)
        return self.exporters[case]

    def file(self, case: str, precision: str) -> Path:
        if (case, precision) not in self.files:
            path = self.run(case) / f"policy-{precision}.tflite"
            self.reports[case, precision] = self.exporter(case).write(precision, str(path))
            self.files[case, precision] = path
        return self.files[case, precision]


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Exports:
    return Exports(tmp_path_factory.mktemp("differential"))


def plain_interpreter(runtime: str, model: bytes) -> Callable[[np.ndarray], np.ndarray]:
    """`model`'s first output for one observation, by `runtime` alone, fed in the dtype the
    file's input declares (what the env gives: float vectors, uint8 frames)."""
    if runtime == "tflite_micro":
        from tflite_micro.python.tflite_micro import runtime as micro

        interpreter = micro.Interpreter.from_bytes(model, arena_size=1 << 21)

        dtype = interpreter.get_input_details(0)["dtype"]

        def run_micro(observation: np.ndarray) -> np.ndarray:
            interpreter.set_input(observation[None].astype(dtype), 0)
            interpreter.invoke()
            return np.array(interpreter.get_output(0)[0])

        return run_micro
    interpreter = importlib.import_module(f"{runtime}.interpreter").Interpreter(
        model_content=model)
    interpreter.allocate_tensors()
    source = interpreter.get_input_details()[0]["index"]
    dtype = interpreter.get_input_details()[0]["dtype"]  # float32; uint8 for frames
    sink = interpreter.get_output_details()[0]["index"]

    def run(observation: np.ndarray) -> np.ndarray:
        interpreter.set_tensor(source, observation[None].astype(dtype))
        interpreter.invoke()
        return interpreter.get_tensor(sink)[0].copy()

    return run


def to_action(output: np.ndarray, space: gym.Space):
    """What a user's loop does with the file's output: argmax of Q-values, or the action in
    the env's units clipped to its bounds."""
    if isinstance(space, gym.spaces.Discrete):
        assert output.shape == (space.n,), output.shape
        return int(np.argmax(output))
    assert output.shape == space.shape, output.shape
    return np.clip(output, space.low, space.high).astype(space.dtype)


def greedy_returns(run: Callable, env_id: str, first: int = 0, count: int = EPISODES
                   ) -> list[float]:
    env = gym.make(env_id)
    returns = []
    for episode in range(first, first + count):
        observation, _ = env.reset(seed=RESET_SEED + episode)
        total, done = 0.0, False
        while not done:
            observation, reward, terminated, truncated, _ = env.step(
                to_action(run(observation), env.action_space))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def comparison(reference: np.ndarray, candidate: np.ndarray, space: gym.Space,
               step: float) -> dict:
    """The export check's numbers (converters.verify.compare_policies) from plain outputs."""
    if isinstance(space, gym.spaces.Discrete):
        matches = reference.argmax(axis=-1) == candidate.argmax(axis=-1)
        decisive = decisive_rows(reference, step)
        return {"agreement": float(matches.mean()),
                "decisive_agreement": float(matches[decisive].mean()) if decisive.any() else 1.0}
    span = (space.high - space.low).astype(np.float64)
    error = np.abs(np.clip(candidate, space.low, space.high).astype(np.float64)
                   - np.clip(reference, space.low, space.high))
    return {"mean_relative_error": float((error / span).mean())}


def env_of(run_dir: Path) -> str:
    return json.loads((run_dir / "config.json").read_text())["env"]


ALL_CASES = [*SHIPPED, *FREE_RUNNING]


@pytest.mark.parametrize("case", ALL_CASES)
def test_every_precision_exports(case, exports):
    for precision in ("fp32", "fp16", "int8"):
        path = exports.file(case, precision)
        assert path.is_file() and path.stat().st_size > 0
        report = "\n".join(exports.reports[case, precision])
        assert "warning" not in report, report


@pytest.mark.parametrize("case", ALL_CASES)
def test_the_fp32_file_acts_as_the_trained_network(case, exports):
    """The reference itself: the fp32 file's first output, read plainly, gives the actions
    the run's network gives in TensorFlow (what the run evaluated)."""
    run_dir = exports.run(case)
    space = gym.make(env_of(run_dir)).action_space
    fp32 = plain_interpreter("ai_edge_litert", exports.file(case, "fp32").read_bytes())
    with np.load(run_dir / "best" / "observations.npz") as saved:
        rows = saved["holdout"][:200] if len(saved["holdout"]) else saved["calibration"][:200]
    plain = np.stack([to_action(fp32(row), space) for row in rows])
    trained = exports.exporter(case).learner.greedy_actions(rows)
    if isinstance(space, gym.spaces.Discrete):
        assert np.mean(plain == trained) >= 0.99  # float rounding may split an exact tie
    else:
        np.testing.assert_allclose(plain, trained, atol=1e-4 * float(np.max(space.high)))


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("case", ALL_CASES)
def test_int8_file_in_a_plain_runtime_holds_the_tolerances(case, runtime, exports):
    pytest.importorskip(runtime)
    run_dir = exports.run(case)
    env_id = env_of(run_dir)
    space = gym.make(env_id).action_space
    fp32 = exports.file(case, "fp32").read_bytes()
    int8 = exports.file(case, "int8").read_bytes()
    reference, candidate = (plain_interpreter("ai_edge_litert", fp32),
                            plain_interpreter(runtime, int8))
    with np.load(run_dir / "best" / "observations.npz") as saved:
        holdout = saved["holdout"] if len(saved["holdout"]) else saved["calibration"]
    rows = holdout[np.linspace(0, len(holdout) - 1, min(HOLDOUT_ROWS, len(holdout))).astype(int)]
    numbers = comparison(np.stack([reference(row) for row in rows]),
                         np.stack([candidate(row) for row in rows]), space, output_step(int8))
    assert tolerance_failures(numbers) == [], numbers
    gap = confirmed_return_gap(
        greedy_returns(reference, env_id), greedy_returns(candidate, env_id),
        lambda first, count: (greedy_returns(reference, env_id, first, count),
                              greedy_returns(candidate, env_id, first, count)))
    assert gap is None, gap


@pytest.mark.parametrize(("case", "input_type"), [("dqn-cartpole", "kTfLiteFloat32"),
                                                  ("td3-pendulum", "kTfLiteFloat32"),
                                                  ("free-dqn-brightpatch", "kTfLiteUInt8")])
def test_tflm_export_writes_c_source(case, input_type, exports, tmp_path):
    lines = exports.exporter(case).write("tflm", str(tmp_path / "policy.cc"))
    assert (tmp_path / "policy.cc").is_file() and (tmp_path / "policy.h").is_file(), lines
    header = (tmp_path / "policy.h").read_text()
    assert "ARENA_SIZE" in header and input_type in header


def test_a_sac_file_for_the_edge_tpu_loads_and_holds_the_tolerances(exports, tmp_path):
    """Two int8 outputs, the first through a slice of the head: the slice keeps its input's
    quantization (LiteRT's kernels refuse one that does not)."""
    from edge_rl.device import Policy

    path = tmp_path / "sac-edgetpu.tflite"
    exports.exporter("sac-pendulum").write("edgetpu", str(path))
    policy = Policy(path.read_bytes())
    rows = np.random.default_rng(0).uniform(-1, 1, (16, 3)).astype(np.float32)
    actions = policy.act(rows)
    assert actions.shape == (16, 1) and np.all(np.abs(actions) <= 2.0)
