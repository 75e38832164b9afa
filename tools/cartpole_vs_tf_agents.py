"""Wall-clock to solve CartPole-v1: `edge-rl train` against TF-Agents' standard DQN loop.

    python tools/cartpole_vs_tf_agents.py [--seeds 0 1 2] [--out DIR] [--dry-run]

For each seed, runs `edge-rl train --env CartPole-v1 --algo dqn --target-return 475
--updates-per-step 1 --replay-priority 0 --atoms 0 --average-tau 0` (its defaults otherwise:
one int8 actor process, greedy evaluation of 20 episodes every 2500 env steps) and then
`tools/tf_agents_dqn.py` (the same network, optimizer, n-step targets, exploration schedule
and evaluation protocol, in TF-Agents' driver + TFUniformReplayBuffer loop), one after the
other so that neither shares the machine with the other. Each is timed as a whole process,
from launch to exit (imports, set-up and evaluations included). Prints a markdown table and
both medians; writes results.json under --out; exits 1 when an edge-rl run did not solve or
edge-rl's median took more than TARGET_RATIO of TF-Agents' (docs/benchmarks.md). --dry-run
prints the commands, checks that both programs are there, and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

TF_AGENTS_DQN = Path(__file__).resolve().parent / "tf_agents_dqn.py"
EDGE_RL = str(Path(sys.executable).parent / "edge-rl")
TARGET = 475.0
TARGET_RATIO = 0.5  # edge-rl's median wall-clock to solve, at most this of TF-Agents'


def run(command: list[str], log: Path) -> float:
    """Run `command` to the end with its output in `log`; returns its wall-clock seconds."""
    start = time.perf_counter()
    with open(log, "w") as out:
        subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - start


def edge_rl_command(seed: int, out: Path) -> list[str]:
    # the algorithm of TF-Agents' loop: one update per env step, uniform replay, the dueling
    # network of expected values and its current weights evaluated (DQN's defaults are 0.25,
    # prioritized replay, C51's network and a weight average on vectors, docs/learning.md), so
    # the loops differ, not it
    return [EDGE_RL, "train", "--env", "CartPole-v1", "--algo", "dqn", "--seed", str(seed),
            "--target-return", str(TARGET), "--updates-per-step", "1",
            "--replay-priority", "0", "--atoms", "0", "--average-tau", "0",
            "--out", str(out / f"edge-rl-{seed}")]


def tf_agents_command(seed: int, out: Path) -> list[str]:
    return [sys.executable, str(TF_AGENTS_DQN), "--seed", str(seed), "--target-return",
            str(TARGET), "--json", str(out / f"tf-agents-{seed}.json")]


def edge_rl_run(seed: int, out: Path) -> dict:
    run_dir = out / f"edge-rl-{seed}"
    seconds = run(edge_rl_command(seed, out), out / f"edge-rl-{seed}.log")
    summary = json.loads(next(run_dir.rglob("summary.json")).read_text())
    best = summary["best_return"] or {}
    return {"loop": "edge-rl", "seed": seed, "process_seconds": round(seconds, 1),
            "solved": best.get("mean", 0) >= TARGET, "env_steps": best.get("env_steps"),
            "run_seconds": summary["wall_clock_seconds"]}


def tf_agents_run(seed: int, out: Path) -> dict:
    result_file = out / f"tf-agents-{seed}.json"
    seconds = run(tf_agents_command(seed, out), out / f"tf-agents-{seed}.log")
    result = json.loads(result_file.read_text())
    return {"loop": "tf-agents", "seed": seed, "process_seconds": round(seconds, 1),
            "solved": result["solved"], "env_steps": result["env_steps"],
            "run_seconds": result["wall_clock_seconds"], "eval_seconds": result["eval_seconds"]}


def dry_run(seeds: list[int], out: Path) -> int:
    """Print the commands in the order they would run; 1 if a program is missing."""
    for seed in seeds:
        for command in (edge_rl_command(seed, out), tf_agents_command(seed, out)):
            print(shlex.join(command))
    missing = [str(p) for p in (Path(EDGE_RL), TF_AGENTS_DQN) if not p.is_file()]
    for path in missing:
        print(f"missing: {path}", file=sys.stderr)
    print(f"{2 * len(seeds)} runs, one after the other")
    return 1 if missing else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/cartpole-vs-tf-agents"))
    parser.add_argument("--dry-run", action="store_true",
                        help="print the commands and check the programs; run nothing")
    args = parser.parse_args()
    if args.dry_run:
        sys.exit(dry_run(args.seeds, args.out))
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in args.seeds:
        for one in (edge_rl_run, tf_agents_run):
            results.append(one(seed, args.out))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))

    print("| loop | seed | solved | env steps at solve | process wall-clock (s) |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['loop']} | {r['seed']} | {'yes' if r['solved'] else 'no'} | "
              f"{r['env_steps']} | {r['process_seconds']:.1f} |")
    medians = median_seconds(results)
    print(f"\nmedian wall-clock: edge-rl {medians['edge-rl']:.1f} s, TF-Agents "
          f"{medians['tf-agents']:.1f} s; edge-rl / TF-Agents = "
          f"{medians['edge-rl'] / medians['tf-agents']:.2f}")
    problems = shortfalls(results)
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    sys.exit(1 if problems else 0)


def median_seconds(results: list[dict]) -> dict[str, float]:
    """Each loop's median process wall-clock over its seeds."""
    return {loop: statistics.median(r["process_seconds"] for r in results if r["loop"] == loop)
            for loop in ("edge-rl", "tf-agents")}


def shortfalls(results: list[dict]) -> list[str]:
    """What keeps these results from meeting the benchmark's targets (none: met)."""
    problems = [f"edge-rl seed {r['seed']} did not reach {TARGET:g}" for r in results
                if r["loop"] == "edge-rl" and not r["solved"]]
    medians = median_seconds(results)
    ratio = medians["edge-rl"] / medians["tf-agents"]
    if ratio > TARGET_RATIO:
        problems.append(f"edge-rl's median took {ratio:.2f} of TF-Agents' "
                        f"(the target: at most {TARGET_RATIO})")
    return problems


if __name__ == "__main__":
    main()
