"""ActorQ's comparison, resumable: fp32, fp16 and int8 actors against one fp32 learner.

    python tools/actorq_compare.py [--suite quantization|framework|actor-bound|d4pg|minatar|all]
        [--seeds 0 1 2] [--steps-dqn N] [--steps-td3 N] [--steps-actor-bound N]
        [--steps-d4pg N] [--steps-minatar N] [--out runs/actorq]
        [--only REGEX] [--max-runs N] [--dry-run] [--report-only] [--report-dir DIR]
        [--threshold ENV=RETURN ...]

Reproduces the comparison of ActorQ (QuaRL, TMLR 2022): the learner always trains in fp32
and only the precision of the policy the actors explore with changes (q=32, 16, 8); the
metrics are the wall-clock time to reach a return threshold (speed-up = time(fp32) /
time(int8)), the final return, and energy and CO2. Five suites:

- quantization: DQN on CartPole-v1 and TD3 on HalfCheetah-v5, edge-rl's defaults otherwise;
- framework: the same runs with actors that act with TF-Agents' own fp32 policy in
  TensorFlow (--actor-precision tf-fp32), as a TF-Agents user's collect loop does; reported
  separately, against the quantization suite's fp32 and int8 runs;
- actor-bound: TD3 on HalfCheetah-v5 with a wide actor (1024x1024), 2 actors and 0.125
  updates per env step (Acme's D4PG default: 32 samples per insert at batches of 256), so
  that more of the time goes into the actors' inference (on 2 cores the learner still sets
  the pace: ~80 updates/s with this actor, ~20 core-ms an update against ~0.05 ms of fp32
  inference an env step);
- d4pg: ActorQ's own headline setting, D4PG on the DeepMind Control Suite (needs the [dmc]
  extra), q=32 against q=8, on cartpole-balance and walker-stand, D4PG's defaults;
- minatar: DQN from pixels (MinAtar's 10x10 planes, a CNN; needs the [minatar] extra), q=32
  against q=8, on Breakout and SpaceInvaders, edge-rl's defaults (docs/pixels.md).

Each setting and seed is one `edge-rl train` run in OUT/SUITE/NAME, output appended to
OUT/SUITE/NAME.log. Finished runs are skipped, interrupted ones resumed (--resume), a failed
one logged and the next started. Ctrl-C stops the current run cleanly (a final checkpoint);
the same command resumes it. Then `edge-rl report` compares the finished runs of each suite
and env against an fp32 run. Standard library and `edge-rl` subprocesses only (no TF here).
Before anything runs it checks that `edge-rl train` takes every flag the runs pass; --dry-run
prints the plan (each run's status and the time it still needs), checks, and runs nothing.

The resumable machinery (run folders, the run loop, clean Ctrl-C) is tools/resumable.py,
which bench_sparse.py and learning_quality.py share.
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from resumable import (
    EDGE_RL,
    RunFolder,
    add_driver_arguments,
    checkpoint_steps,
    read_summary,
    run_logged,
    run_until_interrupted,
    saved_steps,
    slug,
)

log = logging.getLogger("actorq_compare")

PRECISIONS = {"quantization": ("fp32", "fp16", "int8"), "framework": ("tf-fp32",),
              "actor-bound": ("fp32", "fp16", "int8"), "d4pg": ("fp32", "int8"),
              "minatar": ("fp32", "int8")}
EVAL_POINTS = 20  # greedy evaluations per run: the points of the return-vs-time curve
# Return thresholds passed to `edge-rl report` (--threshold ENV=X overrides or adds one).
# CartPole-v1: gymnasium's reward_threshold. HalfCheetah-v5 has none here on purpose: its
# gymnasium threshold (4800) is out of reach in 100k steps; the report's default applies.
THRESHOLDS = {"CartPole-v1": 475.0}

# Rough cost of a run where no finished run of its setting exists yet: seconds of fixed cost
# (interpreter, TensorFlow import, first trace and conversion, actors starting) plus env
# steps at a steady rate. Measured 2026-11 on the 2-core development machine (AMD EPYC, no
# GPU), short runs (int8 unless said): dqn CartPole-v1 --steps 20000 ran 2048 -> 20160 env steps
# in 7.6 s (1780 updates/s); td3 HalfCheetah-v5 --steps 10000 learned at 346 updates/s, i.e.
# ~340 env steps/s at 1 update per step; the actor-bound setting --steps 15000 learned at
# 76 (fp32) and 83 (int8) updates/s, i.e. ~640 env steps/s at 0.125 updates per step.
# d4pg dm_control/cartpole-balance-v0 ran ~380 env steps/s at 1 update per step; dqn
# MinAtar/Breakout-v1 --steps 20000 ran ~1300 env steps/s over the run (15 s).
FIXED_SECONDS = 20.0
STEPS_PER_SECOND = {("quantization", "dqn"): 2000.0, ("quantization", "td3"): 330.0,
                    ("framework", "dqn"): 2000.0, ("framework", "td3"): 330.0,
                    ("actor-bound", "td3"): 640.0, ("d4pg", "d4pg"): 380.0,
                    ("minatar", "dqn"): 1300.0}
STARTUP_SECONDS = 5.0  # a process's start-up that summary.json's wall-clock leaves out


@dataclass(frozen=True)
class Setting:
    """One row of the comparison: everything but the seed."""

    suite: str
    algo: str
    env: str
    precision: str
    steps: int
    flags: tuple[str, ...]  # the same for every precision of a suite, algo and env

    def name(self, seed: int) -> str:
        return f"{self.suite}/{self.algo}-{slug(self.env)}-{self.precision}-s{seed}"


@dataclass(frozen=True)
class Run(RunFolder):
    @property
    def name(self) -> str:
        return self.setting.name(self.seed)


def eval_flags(steps: int, episodes: int) -> tuple[str, ...]:
    return ("--eval-every", str(max(1, steps // EVAL_POINTS)), "--eval-episodes", str(episodes))


def settings_table(args: argparse.Namespace) -> list[Setting]:
    """The settings of the chosen suites, in the order they run."""
    quantization = [
        # edge-rl's defaults otherwise: 1 actor, 1 env, batches of 64, publish every 1000.
        ("dqn", "CartPole-v1", args.steps_dqn,
         ("--updates-per-step", "1", *eval_flags(args.steps_dqn, 10))),
        ("td3", "HalfCheetah-v5", args.steps_td3,
         ("--updates-per-step", "1", *eval_flags(args.steps_td3, 5))),
    ]
    actor_bound = [
        # --hidden is the actor's width once --critic-hidden is given: only the actor (what
        # the actors run) is widened, the critics keep TD3's default 256x256.
        ("td3", "HalfCheetah-v5", args.steps_actor_bound,
         ("--hidden", "1024,1024", "--critic-hidden", "256,256", "--actors", "2",
          "--updates-per-step", "0.125", *eval_flags(args.steps_actor_bound, 5))),
    ]
    control_suite = [
        # D4PG's defaults (Acme's): batches of 256, lr 1e-4, 5-step targets, 51 atoms in
        # [-150, 150]; one update per env step
        (env, args.steps_d4pg, ("--updates-per-step", "1", *eval_flags(args.steps_d4pg, 5)))
        for env in ("dm_control/cartpole-balance-v0", "dm_control/walker-stand-v0")
    ]
    d4pg = [("d4pg", env, steps, flags) for env, steps, flags in control_suite]
    minatar = [("dqn", env, args.steps_minatar, eval_flags(args.steps_minatar, 20))
               for env in ("MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1")]
    # the framework baseline: the quantization suite's runs, actors on TF-Agents' policy
    suites = {"quantization": quantization, "framework": quantization,
              "actor-bound": actor_bound, "d4pg": d4pg, "minatar": minatar}
    chosen = list(suites) if args.suite == "all" else [args.suite]
    return [Setting(suite, algo, env, precision, steps, flags)
            for suite in chosen for algo, env, steps, flags in suites[suite]
            for precision in PRECISIONS[suite]]


def plan_runs(settings: list[Setting], seeds: list[int], out: Path) -> list[Run]:
    """Every run, seed by seed within a suite, algo and env, all precisions of a seed side by
    side: a slice of the work (--max-runs) gives comparable runs, and load drifts spread."""
    groups: dict[tuple[str, str, str], int] = {}
    for s in settings:
        groups.setdefault((s.suite, s.algo, s.env), len(groups))
    runs = [Run(s, seed, out / s.name(seed)) for s in settings for seed in seeds]
    return sorted(runs, key=lambda r: (groups[r.setting.suite, r.setting.algo, r.setting.env],
                                       r.seed))


def run_status(run: Run) -> str:
    """done, resume or new. An interrupted run writes a summary too (stop_reason
    "interrupted"): it counts as unfinished."""
    summary = read_summary(run.run_dir)
    if summary is not None and summary.get("stop_reason") != "interrupted":
        return "done"
    return "resume" if checkpoint_steps(run.run_dir) is not None else "new"


def measured_seconds(setting: Setting, runs: list[Run]) -> float | None:
    """Mean wall-clock of the finished runs of `setting` (any seed), start-up included."""
    seconds = [s["wall_clock_seconds"] for r in runs if r.setting == setting
               if run_status(r) == "done" and saved_steps(r.run_dir) == setting.steps
               if (s := read_summary(r.run_dir))]
    return sum(seconds) / len(seconds) + STARTUP_SECONDS if seconds else None


def estimate_seconds(run: Run, status: str, runs: list[Run]) -> float:
    """Seconds the run still needs: from finished runs of its setting, else the rate table."""
    setting = run.setting
    if status == "done":
        return 0.0
    whole = measured_seconds(setting, runs)
    if whole is None:
        rate = STEPS_PER_SECOND[(setting.suite, setting.algo)]
        whole = FIXED_SECONDS + setting.steps / rate
    if status == "resume":
        left = 1.0 - min(checkpoint_steps(run.run_dir) or 0, setting.steps) / setting.steps
        return FIXED_SECONDS + left * max(whole - FIXED_SECONDS, 0.0)
    return whole


def print_plan(runs: list[Run], every_run: list[Run], max_runs: int | None) -> None:
    """Each run with its status and the seconds it still needs (from `every_run` of its
    setting that finished, whatever --only picked)."""
    statuses = [run_status(r) for r in runs]
    estimates = [estimate_seconds(r, s, every_run) for r, s in zip(runs, statuses, strict=True)]
    width = max((len(r.name) for r in runs), default=0)
    for run, status, seconds in zip(runs, statuses, estimates, strict=True):
        if status == "done":
            note = f"took {read_summary(run.run_dir)['wall_clock_seconds']:.0f} s"
            if run.log_file.is_file() and " train --resume " in run.log_file.read_text():
                note += " (resumed: that includes a restart's fixed cost)"
            if (steps := saved_steps(run.run_dir)) != run.setting.steps:
                note += f" (WARNING: ran --steps {steps}, not {run.setting.steps})"
        else:
            note = f"~{seconds / 60:.1f} min"
        print(f"{run.name:<{width}}  {status:<6}  {note}")
    todo = [e for s, e in zip(statuses, estimates, strict=True) if s != "done"]
    print(f"{len(runs)} runs, {len(todo)} to do: ~{sum(todo) / 60:.1f} min estimated in all"
          + (f"; this session runs at most {max_runs}" if max_runs is not None else ""))


def train_command(run: Run, status: str) -> list[str]:
    out = str(run.run_dir.resolve())  # absolute: the run's cwd is OUT/SUITE
    if status == "resume":  # the saved config.json holds the rest; --steps overrides it
        return [*EDGE_RL, "train", "--resume", "--out", out, "--steps", str(run.setting.steps)]
    s = run.setting
    return [*EDGE_RL, "train", "--algo", s.algo, "--env", s.env, "--steps", str(s.steps),
            "--actor-precision", s.precision, "--seed", str(run.seed), "--out", out, *s.flags]


def unknown_train_flags(commands: list[list[str]]) -> list[str]:
    """The --flags of `edge-rl train` commands that this edge-rl does not take (renamed or
    dropped since the plan was written): neither `edge-rl train --help` nor, for the
    algorithms the commands train, `edge-rl algorithms` names them."""
    def named(*args: str) -> set[str]:
        text = subprocess.run([*EDGE_RL, *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, check=True).stdout
        return set(re.findall(r"--[a-z0-9][a-z0-9-]*", text))

    used = {token for command in commands for token in command if token.startswith("--")}
    unknown = used - named("train", "--help")
    if unknown:  # an algorithm's own options (its import is slow: only when needed)
        algos = {c[c.index("--algo") + 1] for c in commands if "--algo" in c}
        unknown -= named("algorithms", *sorted(algos))
    return sorted(unknown)


def execute(run: Run, status: str) -> bool:
    """Run (or resume) one training with its output appended to its log; True if it ended
    with exit code 0."""
    return run_logged(run.name, train_command(run, status), run.log_file, status == "resume")


def write_reports(runs: list[Run], suites: set[str], report_dir: Path,
                  thresholds: dict[str, float]) -> bool:
    """`edge-rl report` once per suite and env over its finished runs (those of another
    --steps left out); False if one failed."""
    if subprocess.run([*EDGE_RL, "report", "--help"], capture_output=True).returncode != 0:
        log.warning("`edge-rl report` is not available in this edge-rl: no report written")
        return True
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        if run_status(run) == "done" and saved_steps(run.run_dir) == run.setting.steps:
            groups.setdefault((run.setting.suite, run.setting.env), []).append(run)
    ok = True
    for (suite, env), done in groups.items():
        if suite not in suites:  # read only for another suite's report (framework's)
            continue
        reference = "fp32"
        if suite == "framework":  # TF-Agents' actors against edge-rl's fp32 and int8 ones
            reference = "tf-fp32"
            done = done + [r for r in groups.get(("quantization", env), [])
                           if r.setting.precision in ("fp32", "int8")]
        out = report_dir / f"{suite}-{slug(env)}"
        command = [*EDGE_RL, "report", *(str(r.run_dir) for r in done), "-o", str(out)]
        if env in thresholds:
            command += ["--threshold", str(thresholds[env])]
        baseline = next((r for r in done if r.setting.precision == reference), None)
        if baseline is not None:
            command += ["--baseline", str(baseline.run_dir)]
        else:
            log.warning("%s %s: no finished %s run to use as the baseline", suite, env, reference)
        code = subprocess.run(command, stdin=subprocess.DEVNULL).returncode
        if code != 0:
            log.error("report for %s %s failed with exit code %d", suite, env, code)
            ok = False
        else:
            log.info("report for %s %s (%d runs) in %s", suite, env, len(done), out)
    return ok


def parse_thresholds(pairs: list[str]) -> dict[str, float]:
    thresholds = dict(THRESHOLDS)
    for pair in pairs:
        env, _, value = pair.partition("=")
        try:
            thresholds[env] = float(value)
        except ValueError:
            raise SystemExit(f"--threshold expects ENV=RETURN, not {pair!r}") from None
    return thresholds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=[*PRECISIONS, "all"], default="all")
    parser.add_argument("--steps-dqn", type=int, default=100_000)
    parser.add_argument("--steps-td3", type=int, default=100_000)
    parser.add_argument("--steps-actor-bound", type=int, default=50_000)
    parser.add_argument("--steps-d4pg", type=int, default=100_000)
    parser.add_argument("--steps-minatar", type=int, default=500_000)
    add_driver_arguments(parser, "runs/actorq", "--report-only")
    parser.add_argument("--report-dir", type=Path, help="[default: OUT/report]")
    parser.add_argument("--threshold", action="append", default=[], metavar="ENV=RETURN",
                        help=f"Report threshold per env.  [default: {THRESHOLDS}]")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    args = parse_args(argv)
    thresholds = parse_thresholds(args.threshold)
    every_run = plan_runs(settings_table(args), args.seeds, args.out)
    runs = [r for r in every_run if args.only is None or re.search(args.only, r.name)]
    if not runs:
        log.error("no run matches --only %r", args.only)
        return 2
    print_plan(runs, every_run, args.max_runs)
    unknown = unknown_train_flags([train_command(run, "new") for run in runs])
    if unknown:
        log.error("edge-rl train does not take %s: update this driver's settings",
                  ", ".join(unknown))
        return 2
    if args.dry_run:
        return 0
    failed = []
    if not args.report_only:
        failed = run_until_interrupted(runs, args.max_runs, run_status, execute)
        if failed is None:
            return 130
    # every suite's runs: the framework report compares with the quantization suite's
    all_runs = plan_runs(settings_table(argparse.Namespace(**{**vars(args), "suite": "all"})),
                         args.seeds, args.out)
    reported = write_reports(all_runs, {r.setting.suite for r in every_run},
                             args.report_dir or args.out / "report", thresholds)
    for run in failed:
        log.error("failed: %s (log: %s)", run.name, run.log_file)
    return 1 if failed or not reported else 0


if __name__ == "__main__":
    sys.exit(main())
