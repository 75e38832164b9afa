"""Learning quality, resumable: edge-rl's loop against lockstep and a synchronous reference.

    python tools/learning_quality.py [--suite dqn|continuous|staleness|precision|all]
        [--seeds 0 1 2] [--out runs/learning] [--only REGEX] [--max-runs N] [--dry-run]
        [--report-only]

Per setting and seed, one run of:
- default: `edge-rl train` with its defaults (int8 actors in their own process, broadcasts
  every publish_every updates, actors up to max_update_lag updates ahead);
- lockstep: `edge-rl train --lockstep` (one actor, each batch's updates run before its ack);
- publish N/lag M: the staleness ablations (`--publish-every N --max-update-lag M`);
- fp32: the default loop with fp32 actors (`--actor-precision fp32`), what int8 costs;
- sync: tools/sync_reference.py, the same agent, networks, hyperparameters, replay and
  exploration in one process, one env step then its updates, fp32 policy of the newest
  weights (no loop at all).

The report (OUT/report.md, printed too) gives per setting the greedy return at 10k, 25k, 50k
and 100k env steps (mean over seeds with its 95% interval), the late-run stability (of the
evaluations after a seed first came within 5% of its best, the share that stayed there; see
edge_rl.runs.stability) and the wall-clock, next to published figures where there are some.

Finished runs are skipped and interrupted edge-rl runs resumed (an interrupted reference run
starts again); a failed run is logged and the next one started. Ctrl-C stops the current run
cleanly; the same command goes on. No TensorFlow in this process: runs are subprocesses.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from resumable import (
    EDGE_RL,
    RunFolder,
    add_driver_arguments,
    checkpoint_steps,
    drive,
    read_summary,
    run_logged,
    slug,
)

from edge_rl.analysis.compare import T_975  # Student's t, two-sided 95%, by degrees of freedom
from edge_rl.runs.stability import TOLERANCE, late_run_stability

log = logging.getLogger("learning_quality")

HERE = Path(__file__).resolve().parent
SYNC_REFERENCE = [sys.executable, str(HERE / "sync_reference.py")]
CHECKPOINTS = (10_000, 25_000, 50_000, 100_000)  # env steps the report reads returns at

# How each variant runs; "sync" is tools/sync_reference.py, the others `edge-rl train` flags.
VARIANTS = {
    "default": (),
    "lockstep": ("--lockstep",),
    "publish250": ("--publish-every", "250", "--max-update-lag", "500"),
    "publish50": ("--publish-every", "50", "--max-update-lag", "100"),
    "fp32": ("--actor-precision", "fp32"),
    "sync": None,
}
SUITES = {
    # (algo, env, env steps, variants)
    "dqn": [("dqn", "CartPole-v1", 100_000, ("default", "lockstep", "sync")),
            ("dqn", "Acrobot-v1", 100_000, ("default", "lockstep", "sync"))],
    "continuous": [("td3", "HalfCheetah-v5", 100_000, ("default", "lockstep", "sync")),
                   ("sac", "Hopper-v5", 100_000, ("default", "lockstep", "sync")),
                   ("d4pg", "dm_control/cartpole-balance-v0", 100_000,
                    ("default", "lockstep", "sync"))],
    # the cost of asynchrony: broadcast interval / update lag 1000/2000 (the default),
    # 250/500, 50/100, and none (lockstep)
    "staleness": [("dqn", "CartPole-v1", 100_000,
                   ("default", "publish250", "publish50", "lockstep")),
                  ("td3", "HalfCheetah-v5", 100_000,
                   ("default", "publish250", "publish50", "lockstep"))],
    # what int8 actors cost, beside what staleness costs: the default loop with fp32 actors
    "precision": [("td3", "HalfCheetah-v5", 100_000, ("default", "fp32"))],
}
# "At its best" means within 5% of the best (edge_rl.runs.stability), but within 10% on Acrobot,
# whose good policies take 70-90 steps an episode: 5% of -75 is under 4 steps.
STABILITY_TOLERANCE = {"Acrobot-v1": 0.10}
# Published figures to read the tables against, with where they come from.
PUBLISHED = {
    ("dqn", "CartPole-v1"): "500 ± 0 by 50k steps: SB3 rl-baselines3-zoo DQN (benchmark.md; "
                            "net 256x256, lr 2.3e-3)",
    ("dqn", "Acrobot-v1"): "-76.6 ± 11.8 at 100k steps: SB3 rl-baselines3-zoo DQN, one trained "
                           "agent's greedy episodes, ± over episodes (benchmark.md; QR-DQN "
                           "-69.1 ± 10.0)",
    ("td3", "HalfCheetah-v5"): "5514 ± 554 at 100k steps (HalfCheetah-v1): Fujimoto et al. "
                               "2018, TD3's learning curves",
}


@dataclass(frozen=True)
class Setting:
    algo: str
    env: str
    steps: int
    variant: str

    @property
    def title(self) -> str:
        return f"{self.algo} {self.env}"

    def name(self, seed: int) -> str:
        return f"{self.algo}-{slug(self.env)}-{self.variant}-s{seed}"


@dataclass(frozen=True)
class Run(RunFolder):
    def status(self) -> str:
        """done, resume (an edge-rl run with a checkpoint) or new."""
        summary = read_summary(self.run_dir)
        if summary is not None and summary.get("stop_reason") != "interrupted":
            return "done"
        if self.setting.variant != "sync" and checkpoint_steps(self.run_dir) is not None:
            return "resume"
        return "new"

    def command(self, status: str) -> list[str]:
        s, out = self.setting, str(self.run_dir.resolve())
        if s.variant == "sync":
            return [*SYNC_REFERENCE, "--algo", s.algo, "--env", s.env, "--steps", str(s.steps),
                    "--seed", str(self.seed), "--out", out]
        if status == "resume":
            return [*EDGE_RL, "train", "--resume", "--out", out]
        return [*EDGE_RL, "train", "--algo", s.algo, "--env", s.env, "--steps", str(s.steps),
                "--seed", str(self.seed), "--out", out, "--no-carbon", *VARIANTS[s.variant]]


def plan_runs(suite: str, seeds: list[int], out: Path) -> list[Run]:
    """The suite's runs, seed by seed, every variant of a seed side by side (a slice of the
    work then still compares variants); a run shared by two suites appears once."""
    chosen = list(SUITES) if suite == "all" else [suite]
    settings = list(dict.fromkeys(Setting(algo, env, steps, variant)
                                  for name in chosen for algo, env, steps, variants in SUITES[name]
                                  for variant in variants))
    groups = list(dict.fromkeys((s.algo, s.env) for s in settings))
    runs = [Run(s, seed, out / s.name(seed)) for s in settings for seed in seeds]
    return sorted(runs, key=lambda r: (groups.index((r.setting.algo, r.setting.env)), r.seed))


def execute(run: Run, status: str) -> bool:
    """Run (or resume) one run with its output appended to its log; True on exit code 0."""
    return run_logged(run.run_dir.name, run.command(status), run.log_file, status == "resume")


# -- the report ---------------------------------------------------------------------------------

def return_at(evaluations: list[dict], steps: int) -> float | None:
    """The greedy return of the evaluation nearest `steps` env steps (within 10% of it)."""
    near = [e for e in evaluations if abs(e["env_steps"] - steps) <= 0.1 * steps]
    if not near:
        return None
    return min(near, key=lambda e: abs(e["env_steps"] - steps))["mean"]


def interval(values: list[float]) -> str:
    """'412.3 [388.0, 436.6]': the mean and its 95% interval over seeds (Student's t)."""
    if not values:
        return "-"
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.1f}"
    t = T_975[max(d for d in T_975 if d <= len(values) - 1)]  # rounded down: wider
    half = t * statistics.stdev(values) / math.sqrt(len(values))
    return f"{mean:.1f} [{mean - half:.1f}, {mean + half:.1f}]"


def stability_of(summary: dict, tolerance: float) -> float | None:
    """The run's late-run stability within `tolerance` of its best (from its evaluations)."""
    found = late_run_stability([e["mean"] for e in summary["evaluations"]], tolerance)
    return found["fraction"] if found else None


def report(runs: list[Run]) -> str:
    lines = ["# Learning quality", "",
             "Greedy return at fixed env steps: mean over seeds [95% interval]. Late-run "
             "stability: of a seed's evaluations after the first within the column's band of "
             "its best, the share that stayed in it, as mean (lowest seed). Wall-clock: the "
             "run's own seconds (summary.json), mean over seeds.", ""]
    by_title: dict[str, list[Run]] = {}
    for run in runs:
        by_title.setdefault(run.setting.title, []).append(run)
    for title, group in by_title.items():
        first = group[0].setting
        lines += [f"## {title}, {first.steps:,} env steps", ""]
        if (published := PUBLISHED.get((first.algo, first.env))) is not None:
            lines += [f"Published: {published}.", ""]
        tolerance = STABILITY_TOLERANCE.get(first.env, TOLERANCE)
        header = ["variant", "seeds", *(f"{s // 1000}k" for s in CHECKPOINTS),
                  f"stability (±{tolerance:.0%})", "wall-clock (s)"]
        lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        for variant in dict.fromkeys(r.setting.variant for r in group):
            summaries = [(r.seed, s) for r in group if r.setting.variant == variant
                         if r.status() == "done" and (s := read_summary(r.run_dir))]
            if not summaries:
                continue
            cells = [variant, ", ".join(str(seed) for seed, _ in summaries)]
            for steps in CHECKPOINTS:
                values = [v for _, s in summaries
                          if (v := return_at(s["evaluations"], steps)) is not None]
                cells.append(interval(values))
            fractions = [f for _, s in summaries
                         if (f := stability_of(s, tolerance)) is not None]
            cells.append(f"{statistics.fmean(fractions):.2f} ({min(fractions):.2f})"
                         if fractions else "-")
            cells.append(f"{statistics.fmean(s['wall_clock_seconds'] for _, s in summaries):.0f}")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=[*SUITES, "all"], default="all")
    add_driver_arguments(parser, "runs/learning", "--report-only")
    return parser.parse_args(argv)


def print_status(runs: list[Run]) -> None:
    for run in runs:
        print(f"{run.run_dir.name:<50} {run.status()}")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    args = parse_args(argv)
    runs = [r for r in plan_runs(args.suite, args.seeds, args.out)
            if args.only is None or re.search(args.only, r.run_dir.name)]
    return drive(runs, args, print_status, execute, report, args.out / "report.md")


if __name__ == "__main__":
    sys.exit(main())
