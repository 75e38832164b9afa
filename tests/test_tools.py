"""Every file in tools/ keeps running (issue 23).

TOOLS names each file and how CI exercises it: run here in a subprocess with a fast mode
(`--quick`: the real thing, tiny; `--dry-run`: a paper driver's plan, nothing trained;
`--check`), run by another test, used by a tool that is run, or pending. A file missing from
the table fails, so a new tool cannot escape; each run asserts something of its output.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "tools"
TESTS = REPO / "tests"


def positive(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


# -- what each run must show -------------------------------------------------------------------


def bench_loop_measured_every_part(result: subprocess.CompletedProcess, tmp: Path) -> None:
    assert "## Loop benchmark (quick)" in result.stdout
    r = json.loads((tmp / "loop.json").read_text())
    latency = r["actors"]["latency_us"]["256x256"]
    assert all(positive(us) for us in latency.values()), latency
    assert latency["LiteRT int8"] < latency["TF-Agents fp32"], latency
    loops = r["actors"]["steps_per_s"]["256x256"]
    assert set(loops) == {"env only", "TF-Agents fp32, 1 env", "LiteRT fp32, 8 envs",
                          "LiteRT int8, 8 envs", "LiteRT int8, 1 env"}
    assert all(positive(rate) for rate in loops.values()), loops
    process = r["actor_process"]
    assert all(positive(process[k]) for k in ("steps_per_s", "time_to_first_batch_s",
                                              "peak_rss_mb", "patch_ms_median",
                                              "publish_ms_median")), process
    learner = r["learner"]["dqn CartPole-v1"]
    assert len(learner) == 5 and all(positive(rate) for rate in learner.values()), learner
    training = r["training"]["dqn CartPole-v1"]
    assert positive(training["updates_per_s"]) and training["updates"] > 0, training


def bench_ingest_ran_every_phase(result: subprocess.CompletedProcess, tmp: Path) -> None:
    r = json.loads((tmp / "ingest.json").read_text())
    phases = {p["name"]: p["rounds"][0] for p in r["phases"]}
    assert positive(phases["learner alone"]["updates_per_s"]), phases
    ingest = phases["ingest alone, batches of 1000"]
    assert positive(ingest["transitions_per_s"]) and positive(ingest["fsyncs_per_s"]), ingest
    both = phases["both, batches of 1000"]
    assert positive(both["transitions_per_s"]) and positive(both["updates_per_s"]), both
    assert {"both, paced to 20,000/s, batches of 1000",
            "gRPC alone (no-op Insert), paced to 20,000/s, batches of 1000"} <= set(phases)
    assert all(positive(us) for us in r["stages"]["1000"].values()), r["stages"]
    assert "### Insert handler stages" in result.stdout


def sparse_sizes_has_its_row(result: subprocess.CompletedProcess, tmp: Path) -> None:
    row = next(line for line in result.stdout.splitlines()
               if line.startswith("| HalfCheetah-v5 | 0.90 |"))
    ratios = [float(x) for x in re.findall(r"\| ([0-9.]+)x", row)]
    int8, xz, bound, written = ratios
    assert 2 < int8 < 5, row  # int8 of fp32's 32 bits, plus the float first and last layers
    assert int8 < xz <= bound and written == xz, row  # xz finds the zeros of the masks


def tf_agents_dqn_trained_and_evaluated(result: subprocess.CompletedProcess, tmp: Path) -> None:
    r = json.loads((tmp / "dqn.json").read_text())
    assert r["loop"] == "tf-agents" and r["env_steps"] == 1500
    assert [e["env_steps"] for e in r["evaluations"]] == [1250, 1500]
    assert all(1 <= e["mean"] <= 500 for e in r["evaluations"]), r["evaluations"]


def cartpole_vs_tf_agents_plans_both_loops(result: subprocess.CompletedProcess,
                                           tmp: Path) -> None:
    lines = result.stdout.splitlines()
    assert lines[-1] == "4 runs, one after the other"
    edge_rl, tf_agents = lines[0].split(), lines[1].split()
    assert edge_rl[1:3] == ["train", "--env"] and "--seed" in edge_rl
    # the same algorithm as TF-Agents' loop: one update per env step, uniform replay, the
    # dueling network, its current weights evaluated
    for flag in ("--updates-per-step", "--replay-priority", "--atoms", "--average-tau"):
        assert edge_rl[edge_rl.index(flag) + 1] == ("1" if flag == "--updates-per-step" else "0")
    assert edge_rl[-1] == str(tmp / "edge-rl-0")
    assert tf_agents[1].endswith("tools/tf_agents_dqn.py") and tf_agents[-1].endswith(".json")
    assert "--seed 1" in lines[2] and "--seed 1" in lines[3]
    assert not any(tmp.iterdir()), "a dry run writes nothing"


def actorq_compare_plans_every_suite(result: subprocess.CompletedProcess, tmp: Path) -> None:
    # quantization 2 x 3 precisions, framework 2 x 1, actor-bound 1 x 3, d4pg 2 x 2, minatar
    # 2 x 2; 3 seeds
    assert result.stdout.count(" new ") == 57, result.stdout
    assert "57 runs, 57 to do" in result.stdout
    assert "actor-bound/td3-HalfCheetah-v5-int8-s2" in result.stdout
    assert "minatar/dqn-MinAtar-Breakout-v1-int8-s2" in result.stdout
    assert not any(tmp.iterdir()), "a dry run writes nothing"


def bench_pixels_timed_both_cnns_at_every_precision(result: subprocess.CompletedProcess,
                                                    tmp: Path) -> None:
    tables, block = [], []
    for line in [*result.stdout.splitlines(), ""]:
        if line.startswith("| "):
            block.append([c.strip() for c in line.strip("|").split("|")])
        elif block:
            tables, block = [*tables, block[2:]], []  # rows after the header and its rule
    inference, frames = tables
    assert len(inference) == 10, result.stdout  # 2 CNNs x (TF-Agents + 4 precisions)
    for row in inference:
        assert float(row[3]) > 0 and float(row[4]) > 0, row
    assert result.stdout.count("Edge TPU check: passes") == 2, result.stdout
    brightpatch = next(row for row in frames if row[0] == "EdgeRL/BrightPatch-v0")
    replay_bytes = float(brightpatch[3].split()[0].replace(",", ""))
    assert 256 <= replay_bytes < 512, brightpatch  # a 16x16 frame once, plus episode ends
    assert float(brightpatch[4].replace(",", "")) > 0


def stubs_match_the_proto(result: subprocess.CompletedProcess, tmp: Path) -> None:
    assert "match device/wire.proto" in result.stdout


# -- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Runs:
    """Run here: `command` ({tool}: the file's path, {tmp}: an empty temp folder), which must
    exit 0 and pass `check`."""

    command: tuple[str, ...]
    check: Callable[[subprocess.CompletedProcess, Path], None]
    timeout: int = 120
    slow: bool = False


@dataclass(frozen=True)
class RunElsewhere:
    """Run by another test: the file `test` (which names the tool)."""

    test: str


@dataclass(frozen=True)
class Helper:
    """Not a script of its own: imported or started by `tool`, and run with it."""

    tool: str


PY = sys.executable
TOOLS_TABLE: dict[str, Runs | RunElsewhere | Helper] = {
    "actorq_compare.py": Runs((PY, "{tool}", "--dry-run", "--out", "{tmp}"),
                              actorq_compare_plans_every_suite),
    "arm64_check.py": RunElsewhere("test_board.py"),  # and .ci/run, where the machine can
    "bench_common.py": Helper("bench_loop.py"),
    "bench_ingest.py": Runs((PY, "{tool}", "--quick", "--json", "{tmp}/ingest.json"),
                            bench_ingest_ran_every_phase, timeout=300, slow=True),
    "bench_loop.py": Runs((PY, "{tool}", "--quick", "--json", "{tmp}/loop.json"),
                          bench_loop_measured_every_part, timeout=300, slow=True),
    "bench_pixels.py": Runs((PY, "{tool}", "--quick"),
                            bench_pixels_timed_both_cnns_at_every_precision, timeout=300),
    "bench_sparse.py": RunElsewhere("test_bench_sparse.py"),
    "bench_sparse_tables.py": Helper("bench_sparse.py"),
    "bench_startup.py": RunElsewhere("test_learning_tools.py"),
    "cartpole_vs_tf_agents.py": Runs((PY, "{tool}", "--dry-run", "--seeds", "0", "1", "--out",
                                      "{tmp}"), cartpole_vs_tf_agents_plans_both_loops),
    "differential_cases.py": RunElsewhere("test_differential.py"),  # its train_case
    "gen_proto.sh": Runs(("bash", "{tool}", "--check"), stubs_match_the_proto),
    "ingest_learner_side.py": Helper("bench_ingest.py"),
    "ingest_streamer.py": Helper("bench_ingest.py"),
    "learning_quality.py": RunElsewhere("test_learning_tools.py"),
    "netns.py": Helper("netns_fleet.py"),
    "netns_fleet.py": RunElsewhere("test_netns_fleet.py"),
    "resumable.py": Helper("actorq_compare.py"),  # and bench_sparse, learning_quality
    "sparse_sizes.py": Runs((PY, "{tool}", "--quick"), sparse_sizes_has_its_row),
    "sync_reference.py": RunElsewhere("test_learning_tools.py"),
    "tf_agents_dqn.py": Runs((PY, "{tool}", "--quick", "--json", "{tmp}/dqn.json"),
                             tf_agents_dqn_trained_and_evaluated),
}


def tool_files() -> set[str]:
    return {p.name for p in TOOLS.iterdir() if p.suffix in (".py", ".sh")}


def test_every_tool_is_in_the_table_and_every_entry_is_a_tool():
    files = tool_files()
    assert not files - set(TOOLS_TABLE), (
        f"{sorted(files - set(TOOLS_TABLE))}: say in tests/test_tools.py how CI runs it")
    assert not set(TOOLS_TABLE) - files, f"{sorted(set(TOOLS_TABLE) - files)} are gone"


@pytest.mark.parametrize("name", sorted(n for n, e in TOOLS_TABLE.items()
                                        if isinstance(e, RunElsewhere | Helper)))
def test_what_the_table_says_runs_it_names_it(name):
    entry = TOOLS_TABLE[name]
    if isinstance(entry, RunElsewhere):
        runner = TESTS / entry.test
    else:
        runner = TOOLS / entry.tool
        assert isinstance(TOOLS_TABLE[entry.tool], Runs | RunElsewhere), entry
    assert Path(name).stem in runner.read_text(), f"{runner.name} does not use {name}"


def runs() -> list:
    return [pytest.param(name, marks=[pytest.mark.slow] if entry.slow else [])
            for name, entry in sorted(TOOLS_TABLE.items()) if isinstance(entry, Runs)]


@pytest.mark.parametrize("name", runs())
def test_the_tool_runs_in_its_ci_mode(name, tmp_path):
    entry = TOOLS_TABLE[name]
    out, cwd = tmp_path / "out", tmp_path / "cwd"  # cwd: what a tool leaves (MuJoCo's log)
    out.mkdir()
    cwd.mkdir()
    command = [part.format(tool=TOOLS / name, tmp=out) for part in entry.command]
    # the tools find the test's interpreter by $PYTHON (shell scripts) or sys.executable
    env = {**os.environ, "PYTHON": sys.executable, "TF_USE_LEGACY_KERAS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=entry.timeout,
                            env=env, cwd=cwd)
    assert result.returncode == 0, (
        f"{' '.join(command)} exited with {result.returncode}:\n{result.stdout[-2000:]}\n"
        f"{result.stderr[-4000:]}")
    entry.check(result, out)


def test_cartpole_vs_tf_agents_fails_on_a_run_that_did_not_solve_or_a_slow_median():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cartpole_vs_tf_agents",
                                                  TOOLS / "cartpole_vs_tf_agents.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)

    def results(edge_rl_seconds: list[float], solved: bool = True) -> list[dict]:
        return ([{"loop": "edge-rl", "seed": s, "solved": solved or s != 1, "process_seconds": t}
                 for s, t in enumerate(edge_rl_seconds)]
                + [{"loop": "tf-agents", "seed": s, "solved": True, "process_seconds": 100.0}
                   for s in range(len(edge_rl_seconds))])

    assert tool.shortfalls(results([30.0, 45.0, 60.0])) == []
    assert tool.shortfalls(results([30.0, 45.0, 60.0], solved=False)) == [
        "edge-rl seed 1 did not reach 475"]
    (slow,) = tool.shortfalls(results([30.0, 55.0, 60.0]))
    assert "0.55 of TF-Agents'" in slow
