"""A run's fixed cost: seconds from launching `edge-rl train` to its first update, its first
policy at the actors and its first evaluation.

    python tools/bench_startup.py [--launches 3] [--case dqn|td3|all] [--out DIR] [--quick]

Each launch is a short run (1,500 env steps, 500 of warm-up, one evaluation of one episode at
the end) in a new process, as a user starts one. The run notes when each first event happened,
in seconds since its process started (summary.json's "startup"; the interpreter's own start
included), and what each trace of the update loop cost. The table gives the median over the
launches; the process's whole wall-clock is timed here, from launch to exit.

Exit code 1 if a launch fails, or if --max-first-update / --max-first-evaluation is given and
the median is over it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EDGE_RL = [sys.executable, "-m", "edge_rl"]
SHORT_RUN = ["--steps", "1500", "--warmup-steps", "500", "--eval-every", "1500",
             "--eval-episodes", "1", "--no-carbon"]
CASES = {"dqn": ["--algo", "dqn", "--env", "CartPole-v1"],
         "td3": ["--algo", "td3", "--env", "HalfCheetah-v5"]}
# summary.json's startup events, in the order a run meets them
EVENTS = ("training_start", "agent_built", "actors_started", "first_policy", "first_batch",
          "first_update", "first_evaluation")


def launch(case: str, out: Path) -> dict:
    """One short run; its startup marks plus the whole process's wall-clock ("process")."""
    started = time.perf_counter()
    result = subprocess.run([*EDGE_RL, "train", *CASES[case], *SHORT_RUN, "--out", str(out)],
                            capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{case} launch failed (exit {result.returncode}):\n{tail}")
    startup = json.loads((out / "summary.json").read_text())["startup"]
    return {**startup, "process": round(seconds, 3)}


def median_row(case: str, launches: list[dict]) -> list[str]:
    cells = [case, str(len(launches))]
    for event in (*EVENTS, "process"):
        values = [found[event] for found in launches if event in found]
        cells.append(f"{statistics.median(values):.1f}" if values else "-")
    traces = [found["update_traces"] for found in launches]
    counts = sorted({len(t) for t in traces})
    cells.append("/".join(str(c) for c in counts))
    cells.append(f"{statistics.median(sum(t) for t in traces):.1f}")
    return cells


def table(results: dict[str, list[dict]]) -> str:
    header = ["case", "launches", *EVENTS, "process exit", "update-loop traces",
              "tracing (s)"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(median_row(case, runs)) + " |" for case, runs in results.items()]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--case", choices=[*CASES, "all"], default="all")
    parser.add_argument("--out", type=Path, help="Keep the runs here (default: a temporary "
                        "folder, removed after).")
    parser.add_argument("--max-first-update", type=float, metavar="S",
                        help="Fail if DQN's median first update comes later than S seconds.")
    parser.add_argument("--max-first-evaluation", type=float, metavar="S",
                        help="Fail if DQN's median first evaluation comes later than S seconds.")
    parser.add_argument("--quick", action="store_true", help="One DQN launch.")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = list(CASES) if args.case == "all" else [args.case]
    launches = args.launches
    if args.quick:
        cases, launches = ["dqn"], 1
    with tempfile.TemporaryDirectory() as scratch:
        root = args.out or Path(scratch)
        results: dict[str, list[dict]] = {}
        try:
            for case in cases:
                results[case] = [launch(case, root / f"{case}-{i}") for i in range(launches)]
        except RuntimeError as err:
            print(err, file=sys.stderr)
            return 1
    print("Seconds since the process started (median of the launches):\n")
    print(table(results))
    failed = []
    dqn = results.get("dqn", [])
    for event, limit in (("first_update", args.max_first_update),
                         ("first_evaluation", args.max_first_evaluation)):
        if limit is not None and dqn:
            value = statistics.median(found[event] for found in dqn)
            if value > limit:
                failed.append(f"DQN's {event} at {value:.1f} s, over {limit:g} s")
    for line in failed:
        print(f"too slow: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
