"""RLx2's comparison on this machine, resumable: dense, RigL and RLx2 per env, the ablations and
the ultimate compression ratio.

    python tools/bench_sparse.py [--plan campaign|table1|sac] [--steps 300000] [--seeds 0 1 2]
        [--out runs/bench_sparse] [--results DIR] [--only REGEX] [--max-runs N] [--dry-run]
        [--table-only]

Plans (one run per setting and seed; run names say algo, env, method, sparsity and seed):
- campaign (issue 21): TD3 on HalfCheetah-v5, Hopper-v5 and Walker2d-v5, dense, RigL and RLx2 at
  the paper's actor/critic sparsity for the env; then RLx2's two ablations (rlx2-no-delay:
  3-step targets from the start; rlx2-no-buffer: no dynamic replay) on HalfCheetah-v5 and on
  Hopper-v5 (there, where RigL falls behind RLx2: which piece makes the gap), rlx2-no-delay on
  Walker2d-v5 (whether the delay is why RLx2 is short of dense there), and on Hopper-v5
  rlx2-delay10 (RLx2 with the 3-step target from 10% of the run, the paper's fraction, where
  rlx2 waits half the run), and on Walker2d-v5 and Hopper-v5 rlx2-delay50k (the switch at a
  fixed 50k steps); then the compression sweep on Hopper-v5, RigL, RLx2 and rlx2-no-delay at
  0.9/0.85, 0.95/0.9 and 0.98/0.95; from 1M steps on, on Hopper-v5, rlx2-no-delay-no-buffer (the
  default without its dynamic buffer) and dense-replay100k (dense with a replay of the buffer's
  1e5 minimum): whether that window is RLx2's gap there; then dense-nstep3 (dense with RLx2's
  3-step target): whether that target is. The rlx2 rows (and rlx2-no-buffer's)
  switch to 3-step targets at half the run, at most 300k: `--rlx2`'s default when their records
  were made. Since 2026-11-27 `--rlx2` itself does not wait below 3M steps with TD3:
  rlx2-no-delay is TD3's default's row; with SAC it waits half the run again since 2026-12-04,
  so the rlx2 row is SAC's default's.
- table1: RLx2's Table 1 methods on HalfCheetah-v5 at 0.9/0.85: dense, tiny (dense, as many
  parameters as the sparse nets), static (a fixed random mask), SET, RigL, RLx2.
- sac: SAC on HalfCheetah-v5 at the paper's 0.9/0.8: dense, RigL, RLx2 (3-step targets from
  half the run: `--rlx2`'s default with SAC) and rlx2-no-delay (3-step targets from the start,
  SAC's default from 2026-11-27 to 2026-12-04).

Runs go seed by seed, so a slice of the work already compares methods. Each finished run's
int8 policy is exported (dense also in fp32, the size baseline). Finished runs are skipped,
interrupted ones resumed from their last checkpoint; Ctrl-C stops the current run cleanly and
the same command goes on. No TensorFlow in this process: runs are subprocesses.

Each finished run also leaves a record, RESULTS/GROUP/RUN.json (default RESULTS: OUT/results):
what the tables read of it (its evaluations, parameter and FLOP counts, file sizes), a few KB
where the run's folder holds GBs of checkpoints. A run whose folder is gone but whose record
is there counts as done and stays in the tables, so a campaign spread over machines that do
not keep their folders goes on where it stopped (edge-rl's own campaign keeps its records in
docs/results/bench_sparse: `--results docs/results/bench_sparse`).

The tables (OUT/table.md, printed too), per algo, env and budget: score = mean of the last 10
evaluations (every 5,000 steps, 10 episodes); % of dense with a 95% bootstrap interval over
seeds; parameters, training and inference FLOPs relative to dense; the int8 file and what is
sent and stored; the paper's % of dense beside it. Where several sparsities ran: the ultimate
compression ratio, the sparsest setting whose mean is within 3% of dense's (the paper's
definition), as 1 / (its parameters relative to dense). A pace table beside each says how far
behind dense's curve a method is and how many seeds each side would need for the interval to
settle 97% of dense, projected from the seeds so far up to --most-seeds (30 by default).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from bench_sparse_tables import MOST_SEEDS, PAPER, tables
from resumable import (
    EDGE_RL,
    RunFolder,
    add_driver_arguments,
    checkpoint_steps,
    drive,
    read_json,
    read_summary,
    run_logged,
    slug,
)

from edge_rl.algorithm import half_run_nstep_delay

log = logging.getLogger("bench_sparse")

METHODS = {
    "dense": (),
    "tiny": ("--tiny",),
    "static": ("--topology", "static"),
    "set": ("--topology", "set"),
    "rigl": ("--topology", "rigl"),
    # rlx2, rlx2-no-buffer and rlx2-delay10 also get --nstep-delay: see Setting.flags
    "rlx2": ("--topology", "rigl", "--rlx2"),
    "rlx2-no-delay": ("--topology", "rigl", "--dynamic-buffer", "--nstep", "3"),
    "rlx2-no-buffer": ("--topology", "rigl", "--delayed-nstep"),
    "rlx2-delay10": ("--topology", "rigl", "--rlx2"),
    # a fixed 50k steps of 1-step targets: what the default gives a 100k run, where the delay
    # paid; at 300k the default's 150k cost (docs/sparse.md, "The delay at 100k")
    "rlx2-delay50k": ("--topology", "rigl", "--rlx2", "--nstep-delay", "50000"),
    # the 1M question on Hopper: RLx2's replay held its 1e5 minimum from 100k steps to 1M
    # (docs/sparse.md); the default without its dynamic buffer, and dense with that window
    "rlx2-no-delay-no-buffer": ("--topology", "rigl", "--nstep", "3"),
    "dense-replay100k": ("--replay-capacity", "100000"),
    # the next 1M question on Hopper: whether the 3-step target, which the default uses from the
    # first step, is what holds it below dense there; dense with that target
    "dense-nstep3": ("--nstep", "3"),
}


SWEEP = ((0.9, 0.85), (0.95, 0.9), (0.98, 0.95))  # the compression sweep's (actor, critic)
EVAL_FLAGS = ("--eval-every", "5000", "--eval-episodes", "10", "--no-carbon")
STEPS_PER_SECOND = 300.0  # TD3 on MuJoCo here, before a run of the setting has finished
FIXED_SECONDS = 40.0  # start-up and the exports


@dataclass(frozen=True)
class Setting:
    algo: str
    env: str
    steps: int
    method: str
    sparsity: tuple[float, float] | None = None  # (actor, critic); None for dense

    @property
    def label(self) -> str:
        if self.sparsity is None:
            return self.method
        actor, critic = self.sparsity
        return f"{self.method}-a{round(actor * 100)}c{round(critic * 100)}"

    def flags(self) -> list[str]:
        flags = list(METHODS[self.method])
        if self.method == "rlx2-delay10":
            flags += ["--nstep-delay", str(self.steps // 10)]
        elif self.method in ("rlx2", "rlx2-no-buffer"):
            # `--rlx2`'s default when their records were made (until 2026-11-27); with TD3
            # it is now none below 3M steps, what the rlx2-no-delay rows run
            flags += ["--nstep-delay", str(half_run_nstep_delay(self.steps))]
        if self.sparsity is not None:
            flags += ["--sparsity", str(self.sparsity[0]),
                      "--critic-sparsity", str(self.sparsity[1])]
        return flags


@dataclass(frozen=True)
class Run(RunFolder):
    record_file: Path  # RESULTS/GROUP/RUN.json: the finished run, kept small

    def exports(self) -> list[str]:
        return ["int8", "fp32"] if self.setting.method == "dense" else ["int8"]

    def exported(self) -> bool:
        return all((self.run_dir / f"policy-{p}.tflite").is_file() for p in self.exports())

    def finished_here(self) -> dict | None:
        """The summary in the run's folder, if training finished there."""
        summary = read_summary(self.run_dir)
        return summary if summary and summary.get("stop_reason") != "interrupted" else None

    def record(self) -> dict | None:
        return read_json(self.record_file)

    def trained(self) -> dict | None:
        """The finished run's summary: from its folder, else from its record."""
        return self.finished_here() or (self.record() or {}).get("summary")

    def file_sizes(self) -> dict[str, int]:
        """Bytes of the int8 file, of what is sent and stored (its xz form for sparse runs)
        and of the fp32 file; 0 where none was written (the export check refused it)."""
        if not self.finished_here() and (record := self.record()):
            return record["files"]
        size = {name: (self.run_dir / name).stat().st_size
                if (self.run_dir / name).is_file() else 0
                for name in ("policy-int8.tflite", "policy-int8.tflite.xz", "policy-fp32.tflite")}
        return {"int8": size["policy-int8.tflite"],
                "stored": size["policy-int8.tflite.xz"] or size["policy-int8.tflite"],
                "fp32": size["policy-fp32.tflite"]}

    def status(self) -> str:
        """done, export (trained, not exported), resume (a checkpoint) or new. A run with a
        record and no folder is done: its folder was on another machine."""
        if self.finished_here():
            return "done" if self.exported() else "export"
        if self.record():
            return "done"
        return "resume" if checkpoint_steps(self.run_dir) is not None else "new"

    def keep_record(self) -> None:
        """Write the finished run's record: what the tables read, nothing else."""
        summary = self.finished_here()
        if summary is None:
            return
        networks = summary["networks"]
        kept = {
            "evaluations": [{"env_steps": e["env_steps"], "mean": e["mean"]}
                            for e in summary["evaluations"]],
            "updates": summary["updates"],
            "wall_clock_seconds": summary["wall_clock_seconds"],
            "stop_reason": summary["stop_reason"],
            "networks": {"train_flops": networks["train_flops"],
                         "inference_flops": networks["inference_flops"],
                         "groups": {name: {"nonzero_parameters": g["nonzero_parameters"]}
                                    for name, g in networks["groups"].items()}},
        }
        # the command as a user would type it (no interpreter, no machine's folder)
        command = ["edge-rl", *self.train_command("new")[len(EDGE_RL):]]
        out = command.index("--out")
        del command[out:out + 2]
        record = {"command": command, "summary": kept,
                  "files": self.file_sizes()}
        self.record_file.parent.mkdir(parents=True, exist_ok=True)
        self.record_file.write_text(json.dumps(record, indent=1) + "\n")

    def train_command(self, status: str) -> list[str]:
        s, out = self.setting, str(self.run_dir.resolve())
        if status == "resume":
            return [*EDGE_RL, "train", "--resume", "--out", out]
        return [*EDGE_RL, "train", "--algo", s.algo, "--env", s.env, "--steps", str(s.steps),
                "--seed", str(self.seed), "--out", out, *EVAL_FLAGS, *s.flags()]


def plan_runs(plan: str, steps: int, seeds: list[int], out: Path,
              results: Path | None = None) -> list[Run]:
    """The plan's runs in the order they are made (see the module's doc); their records go
    in `results` (default: OUT/results)."""
    results = results or out / "results"
    def at_paper_sparsity(algo: str, env: str, methods: tuple[str, ...]) -> list[Setting]:
        sparsity = PAPER[(algo, env)][0]
        return [Setting(algo, env, steps, m, None if m == "dense" else sparsity) for m in methods]

    main: list[Setting] = []
    extra: list[Setting] = []
    if plan == "campaign":
        for env in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"):
            main += at_paper_sparsity("td3", env, ("dense", "rigl", "rlx2"))
        for env in ("HalfCheetah-v5", "Hopper-v5"):
            extra += at_paper_sparsity("td3", env, ("rlx2-no-delay", "rlx2-no-buffer"))
        extra += at_paper_sparsity("td3", "Walker2d-v5", ("rlx2-no-delay", "rlx2-delay50k"))
        extra += at_paper_sparsity("td3", "Hopper-v5", ("rlx2-delay10", "rlx2-delay50k"))
        extra += [Setting("td3", "Hopper-v5", steps, m, s) for s in SWEEP
                  for m in ("rigl", "rlx2", "rlx2-no-delay")]
        if steps >= 1_000_000:  # where the replay's 1e5 window is a tenth of the data
            extra += at_paper_sparsity("td3", "Hopper-v5", ("rlx2-no-delay-no-buffer",))
            extra.append(Setting("td3", "Hopper-v5", steps, "dense-replay100k"))
            extra.append(Setting("td3", "Hopper-v5", steps, "dense-nstep3"))
    elif plan == "table1":
        main = at_paper_sparsity("td3", "HalfCheetah-v5", ("dense", "tiny", "static", "set",
                                                           "rigl", "rlx2"))
    elif plan == "sac":
        main = at_paper_sparsity("sac", "HalfCheetah-v5",
                                  ("dense", "rigl", "rlx2", "rlx2-no-delay"))
    else:
        raise SystemExit(f"unknown plan {plan!r}")
    runs: list[Run] = []
    for settings in (main, extra):
        for seed in seeds:
            for s in settings:
                group, name = f"{s.algo}-{slug(s.env)}-{s.steps // 1000}k", f"{s.label}-s{seed}"
                run = Run(s, seed, out / group / name, results / group / f"{name}.json")
                if run not in runs:  # the sweep's 0.98/0.95 on Hopper is the main setting
                    runs.append(run)
    return runs


def execute(run: Run, status: str) -> bool:
    """Train (or resume) the run, then export it; True if every step exited 0."""
    if status != "export" and not run_logged(run.run_dir.name, run.train_command(status),
                                             run.log_file, status == "resume"):
        return False
    # every precision in one call, which writes the others when one is refused: dense's fp32
    # file is the tables' size baseline whatever its int8 export's check says
    exported = run_logged(f"{run.run_dir.name} export {' '.join(run.exports())}",
                          [*EDGE_RL, "export", str(run.run_dir.resolve()),
                           *(f"--{precision}" for precision in run.exports()),
                           "--verify-episodes", "0"], run.log_file, False)
    run.keep_record()
    return exported


def estimate_seconds(run: Run, status: str, runs: list[Run]) -> float:
    """From finished runs of the same algo, env, budget and method; else a rate guess."""
    if status == "done":
        return 0.0
    if status == "export":
        return FIXED_SECONDS
    same = [s["wall_clock_seconds"] for r in runs
            if (r.setting.algo, r.setting.env, r.setting.steps, r.setting.method) ==
            (run.setting.algo, run.setting.env, run.setting.steps, run.setting.method)
            if (s := r.trained())]
    whole = (float(np.mean(same)) if same else run.setting.steps / STEPS_PER_SECOND)
    done = min(checkpoint_steps(run.run_dir) or 0, run.setting.steps) if status == "resume" else 0
    return FIXED_SECONDS + whole * (1 - done / run.setting.steps)


def print_plan(runs: list[Run]) -> None:
    statuses = [r.status() for r in runs]
    seconds = [estimate_seconds(r, s, runs) for r, s in zip(runs, statuses, strict=True)]
    for run, status, estimate in zip(runs, statuses, seconds, strict=True):
        name = f"{run.run_dir.parent.name}/{run.run_dir.name}"
        note = "" if status == "done" else f"~{estimate / 60:.0f} min"
        print(f"{name:<56} {status:<7} {note}")
    todo = sum(1 for s in statuses if s != "done")
    print(f"{len(runs)} runs, {todo} to do: ~{sum(seconds) / 3600:.1f} h estimated")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", choices=["campaign", "table1", "sac"], default="campaign")
    parser.add_argument("--steps", type=int, default=300_000)
    add_driver_arguments(parser, "runs/bench_sparse", "--table-only")
    parser.add_argument("--results", type=Path, metavar="DIR",
                        help="Where each finished run's record goes (default: OUT/results).")
    parser.add_argument("--most-seeds", type=int, default=MOST_SEEDS, metavar="N",
                        help="The most seeds the tables' last column projects to (default: "
                             f"{MOST_SEEDS}).")
    args = parser.parse_args(argv)
    if args.most_seeds < 2:
        parser.error(f"--most-seeds must be at least 2 (a projection needs a spread), not "
                     f"{args.most_seeds}")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    args = parse_args(argv)
    runs = [r for r in plan_runs(args.plan, args.steps, args.seeds, args.out, args.results)
            if args.only is None or re.search(args.only, str(r.run_dir))]
    report = functools.partial(tables, most_seeds=args.most_seeds)
    return drive(runs, args, print_plan, execute, report, args.out / "table.md")


if __name__ == "__main__":
    raise SystemExit(main())
