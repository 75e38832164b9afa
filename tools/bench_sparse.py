"""RLx2's comparison on this machine, resumable: dense, RigL and RLx2 per env, the ablations and
the ultimate compression ratio.

    python tools/bench_sparse.py [--plan campaign|table1|sac] [--steps 300000] [--seeds 0 1 2]
        [--out runs/bench_sparse] [--only REGEX] [--max-runs N] [--dry-run] [--table-only]

Plans (one run per setting and seed; run names say algo, env, method, sparsity and seed):
- campaign (issue 21): TD3 on HalfCheetah-v5, Hopper-v5 and Walker2d-v5, dense, RigL and RLx2 at
  the paper's actor/critic sparsity for the env; then RLx2's two ablations on HalfCheetah-v5
  (rlx2-no-delay: 3-step targets from the start; rlx2-no-buffer: no dynamic replay); then the
  compression sweep on Hopper-v5, RigL and RLx2 at 0.9/0.85, 0.95/0.9 and 0.98/0.95.
- table1: RLx2's Table 1 methods on HalfCheetah-v5 at 0.9/0.85: dense, tiny (dense, as many
  parameters as the sparse nets), static (a fixed random mask), SET, RigL, RLx2.
- sac: SAC on HalfCheetah-v5 at the paper's 0.9/0.8: dense, RigL, RLx2.

Runs go seed by seed, so a slice of the work already compares methods. Each finished run's
int8 policy is exported (dense also in fp32, the size baseline). Finished runs are skipped,
interrupted ones resumed from their last checkpoint; Ctrl-C stops the current run cleanly and
the same command goes on. No TensorFlow in this process: runs are subprocesses.

The tables (OUT/table.md, printed too), per algo, env and budget: score = mean of the last 10
evaluations (every 5,000 steps, 10 episodes); % of dense with a 95% bootstrap interval over
seeds; parameters, training and inference FLOPs relative to dense; the int8 file and what is
sent and stored; the paper's % of dense beside it. Where several sparsities ran: the ultimate
compression ratio, the sparsest setting whose mean is within 3% of dense's (the paper's
definition), as 1 / (its parameters relative to dense).
"""

from __future__ import annotations

import argparse
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from actorq_compare import (
    EDGE_RL,
    RunFolder,
    add_driver_arguments,
    checkpoint_steps,
    drive,
    read_summary,
    run_logged,
    slug,
)

log = logging.getLogger("bench_sparse")

METHODS = {
    "dense": (),
    "tiny": ("--tiny",),
    "static": ("--topology", "static"),
    "set": ("--topology", "set"),
    "rigl": ("--topology", "rigl"),
    "rlx2": ("--topology", "rigl", "--rlx2"),
    "rlx2-no-delay": ("--topology", "rigl", "--dynamic-buffer", "--nstep", "3"),
    "rlx2-no-buffer": ("--topology", "rigl", "--delayed-nstep"),
}
# RLx2 (Tan et al., ICLR 2023), Table 1 at 3M steps: actor/critic sparsity per algo and env, and
# each method's score as % of dense.
PAPER = {
    ("td3", "HalfCheetah-v5"): ((0.9, 0.85), {"tiny": 86.3, "static": 77.1, "set": 92.6,
                                              "rigl": 90.8, "rlx2": 99.8}),
    ("td3", "Hopper-v5"): ((0.98, 0.95), {"tiny": 64.5, "static": 67.7, "set": 66.5,
                                          "rigl": 90.6, "rlx2": 97.0}),
    ("td3", "Walker2d-v5"): ((0.97, 0.95), {"tiny": 60.8, "static": 42.9, "set": 39.3,
                                            "rigl": 35.7, "rlx2": 98.1}),
    ("sac", "HalfCheetah-v5"): ((0.9, 0.8), {"tiny": 95.0, "static": 75.4, "set": 94.8,
                                             "rigl": 89.8, "rlx2": 102.2}),
}
SWEEP = ((0.9, 0.85), (0.95, 0.9), (0.98, 0.95))  # the compression sweep's (actor, critic)
WITHIN = 3.0  # % of dense: the paper's "ultimate compression ratio" criterion
LAST_EVALUATIONS = 10
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
        if self.sparsity is not None:
            flags += ["--sparsity", str(self.sparsity[0]),
                      "--critic-sparsity", str(self.sparsity[1])]
        return flags


@dataclass(frozen=True)
class Run(RunFolder):
    def exports(self) -> list[str]:
        return ["int8", "fp32"] if self.setting.method == "dense" else ["int8"]

    def exported(self) -> bool:
        return all((self.run_dir / f"policy-{p}.tflite").is_file() for p in self.exports())

    def trained(self) -> dict | None:
        summary = read_summary(self.run_dir)
        return summary if summary and summary.get("stop_reason") != "interrupted" else None

    def status(self) -> str:
        """done, export (trained, not exported), resume (a checkpoint) or new."""
        if self.trained():
            return "done" if self.exported() else "export"
        return "resume" if checkpoint_steps(self.run_dir) is not None else "new"

    def train_command(self, status: str) -> list[str]:
        s, out = self.setting, str(self.run_dir.resolve())
        if status == "resume":
            return [*EDGE_RL, "train", "--resume", "--out", out]
        return [*EDGE_RL, "train", "--algo", s.algo, "--env", s.env, "--steps", str(s.steps),
                "--seed", str(self.seed), "--out", out, *EVAL_FLAGS, *s.flags()]


def plan_runs(plan: str, steps: int, seeds: list[int], out: Path) -> list[Run]:
    """The plan's runs in the order they are made (see the module's doc)."""
    def at_paper_sparsity(algo: str, env: str, methods: tuple[str, ...]) -> list[Setting]:
        sparsity = PAPER[(algo, env)][0]
        return [Setting(algo, env, steps, m, None if m == "dense" else sparsity) for m in methods]

    main: list[Setting] = []
    extra: list[Setting] = []
    if plan == "campaign":
        for env in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"):
            main += at_paper_sparsity("td3", env, ("dense", "rigl", "rlx2"))
        extra += at_paper_sparsity("td3", "HalfCheetah-v5", ("rlx2-no-delay", "rlx2-no-buffer"))
        extra += [Setting("td3", "Hopper-v5", steps, m, s) for s in SWEEP for m in ("rigl", "rlx2")]
    elif plan == "table1":
        main = at_paper_sparsity("td3", "HalfCheetah-v5", ("dense", "tiny", "static", "set",
                                                           "rigl", "rlx2"))
    elif plan == "sac":
        main = at_paper_sparsity("sac", "HalfCheetah-v5", ("dense", "rigl", "rlx2"))
    else:
        raise SystemExit(f"unknown plan {plan!r}")
    runs: list[Run] = []
    for settings in (main, extra):
        for seed in seeds:
            for s in settings:
                run = Run(s, seed, out / f"{s.algo}-{slug(s.env)}-{s.steps // 1000}k" /
                          f"{s.label}-s{seed}")
                if run not in runs:  # the sweep's 0.98/0.95 on Hopper is the main setting
                    runs.append(run)
    return runs


def execute(run: Run, status: str) -> bool:
    """Train (or resume) the run, then export it; True if every step exited 0."""
    if status != "export" and not run_logged(run.run_dir.name, run.train_command(status),
                                             run.log_file, status == "resume"):
        return False
    return all(run_logged(f"{run.run_dir.name} export {precision}",
                          [*EDGE_RL, "export", str(run.run_dir.resolve()), f"--{precision}",
                           "--verify-episodes", "0"], run.log_file, False)
               for precision in run.exports())


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


# -- the tables ---------------------------------------------------------------------------------

def score(summary: dict) -> float:
    returns = [e["mean"] for e in summary["evaluations"]]
    return float(np.mean(returns[-LAST_EVALUATIONS:]))


def bootstrap_ratio(values: list[float], dense: list[float], rng, samples: int = 10_000
                    ) -> tuple[float, float]:
    """95% interval of mean(values) / mean(dense) in %, resampling seeds of each."""
    values, dense = np.asarray(values), np.asarray(dense)
    a = rng.choice(values, (samples, len(values))).mean(axis=1)
    b = rng.choice(dense, (samples, len(dense))).mean(axis=1)
    ratios = 100 * a / b
    return float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def file_sizes(run_dir: Path) -> tuple[int, int]:
    """The int8 file's bytes, and what is sent and stored (its xz form for sparse runs)."""
    plain = run_dir / "policy-int8.tflite"
    packed = run_dir / "policy-int8.tflite.xz"
    size = plain.stat().st_size if plain.is_file() else 0
    return size, packed.stat().st_size if packed.is_file() else size


def parameters(summary: dict) -> int:
    return sum(g["nonzero_parameters"] for g in summary["networks"]["groups"].values())


@dataclass
class Row:
    setting: Setting
    runs: list[Run]
    summaries: list[dict]

    @property
    def scores(self) -> list[float]:
        return [score(s) for s in self.summaries]


def rows_of(runs: list[Run]) -> dict[tuple[str, str, int], list[Row]]:
    """Finished runs grouped by (algo, env, steps), one Row per setting."""
    groups: dict[tuple[str, str, int], dict[Setting, Row]] = {}
    for run in runs:
        if (summary := run.trained()) is None:
            continue
        s = run.setting
        group = groups.setdefault((s.algo, s.env, s.steps), {})
        row = group.setdefault(s, Row(s, [], []))
        row.runs.append(run)
        row.summaries.append(summary)
    return {key: list(group.values()) for key, group in groups.items()}


def env_table(key: tuple[str, str, int], rows: list[Row], rng) -> list[str]:
    algo, env, steps = key
    dense = next((r for r in rows if r.setting.method == "dense"), None)
    lines = [f"## {algo.upper()} {env}, {steps:,} env steps", ""]
    if dense is None:
        return lines + ["No finished dense run yet: nothing to compare with.", ""]
    ref = dense.summaries[0]
    dense_params = parameters(ref)
    dense_train = ref["networks"]["train_flops"] / ref["updates"]
    dense_infer = ref["networks"]["inference_flops"]
    dense_fp32 = dense.runs[0].run_dir / "policy-fp32.tflite"
    fp32_bytes = dense_fp32.stat().st_size if dense_fp32.is_file() else 0
    paper = PAPER.get((algo, env), (None, {}))[1]
    lines += ["| method | seeds | score (mean ± sd) | % of dense [95% CI] | paper (3M) | params "
              "| train FLOPs | infer FLOPs | int8 file | sent and stored (vs dense fp32) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    any_refused = False
    for row in rows:
        summary = row.summaries[0]
        scores = row.scores
        low, high = bootstrap_ratio(scores, dense.scores, rng)
        percent = 100 * np.mean(scores) / np.mean(dense.scores)
        # the files of the first seed whose int8 export was written (the check may refuse one)
        sizes = [file_sizes(run.run_dir) for run in row.runs]
        plain, packed = next((size for size in sizes if size[0]), (0, 0))
        refused = sum(1 for size in sizes if not size[0])
        any_refused = any_refused or refused > 0
        int8_file = (f"{plain / 1024:.1f} KiB" if plain else "refused") + (
            f" ({refused} of {len(sizes)} refused)" if plain and refused else "")
        stored = (f"{packed / 1024:.1f} KiB ({fp32_bytes / packed:.1f}x < fp32)"
                  if packed and fp32_bytes else "-")
        published = paper.get(row.setting.method) if row.setting.sparsity == PAPER.get(
            (algo, env), (None,))[0] else None
        lines.append(
            f"| {row.setting.label} | {len(scores)} | {np.mean(scores):.0f} ± "
            f"{np.std(scores):.0f} | {percent:.1f} [{low:.1f}, {high:.1f}] | "
            f"{'-' if published is None else published} | "
            f"{parameters(summary) / dense_params:.3f} | "
            f"{summary['networks']['train_flops'] / summary['updates'] / dense_train:.3f} | "
            f"{summary['networks']['inference_flops'] / dense_infer:.3f} | "
            f"{int8_file} | {stored} |")
    lines.append("")
    if any_refused:
        lines += ["refused: `edge-rl export --int8` refused the int8 file (its export check: "
                  "see the run's log), so none was written for that seed.", ""]
    return lines + pace_table(rows, dense) + compression_table(rows, dense) + [""]


def window_means(summary: dict) -> tuple[list[int], np.ndarray]:
    """(env steps, mean return of the LAST_EVALUATIONS evaluations up to each step), from the
    first full window on: the score's own measure, along the run."""
    returns = np.asarray([e["mean"] for e in summary["evaluations"]])
    steps = [e["env_steps"] for e in summary["evaluations"]][LAST_EVALUATIONS - 1:]
    sums = np.convolve(returns, np.ones(LAST_EVALUATIONS), mode="valid")
    return steps, sums / LAST_EVALUATIONS


def pace_table(rows: list[Row], dense: Row) -> list[str]:
    """How far behind dense a method is in env steps (where dense's seeds' mean curve first
    reached the method's score), and whether the method was still improving at the end (its
    last LAST_EVALUATIONS evaluations against the ones before): what a longer budget would do."""
    curves = [window_means(s) for s in dense.summaries]
    n = min(len(means) for _, means in curves)
    dense_steps, dense_curve = curves[0][0][:n], np.mean([m[:n] for _, m in curves], axis=0)
    lines = [f"| method | dense's curve reached this score at (env steps) | last "
             f"{LAST_EVALUATIONS} evaluations against the {LAST_EVALUATIONS} before |",
             "|---|---|---|"]
    for row in rows:
        reached = np.flatnonzero(dense_curve >= np.mean(row.scores))
        at = ("-" if row is dense else f"{dense_steps[reached[0]]:,}" if len(reached) else
              "never (above dense)")
        changes = []
        for summary in row.summaries:
            _, means = window_means(summary)
            if len(means) > LAST_EVALUATIONS:
                before, last = means[-LAST_EVALUATIONS - 1], means[-1]
                changes.append(100 * (last - before) / max(abs(before), 1e-9))
        trend = f"{np.mean(changes):+.0f}%" if changes else "-"
        lines.append(f"| {row.setting.label} | {at} | {trend} |")
    return lines + [""]


def compression_table(rows: list[Row], dense: Row) -> list[str]:
    """Per sparse method run at several sparsities: the sparsest within WITHIN% of dense."""
    lines = []
    dense_mean = float(np.mean(dense.scores))
    dense_params = parameters(dense.summaries[0])
    for method in dict.fromkeys(r.setting.method for r in rows):
        swept = sorted((r for r in rows if r.setting.method == method and r.setting.sparsity),
                       key=lambda r: parameters(r.summaries[0]), reverse=True)
        if len(swept) < 2:
            continue
        within = [r for r in swept if np.mean(r.scores) >= (1 - WITHIN / 100) * dense_mean]
        best = min(within, key=lambda r: parameters(r.summaries[0]), default=None)
        ratio = (f"{dense_params / parameters(best.summaries[0]):.1f}x "
                 f"({best.setting.label}, {len(best.scores)} seeds)" if best else
                 f"none of {len(swept)} settings within {WITHIN:.0f}% of dense")
        lines.append(f"Ultimate compression ratio, {method}: {ratio}.")
    return lines


def tables(runs: list[Run]) -> str:
    rng = np.random.default_rng(0)
    lines = ["# RLx2's comparison", "",
             f"Score: mean of the last {LAST_EVALUATIONS} greedy evaluations (every 5,000 env "
             "steps, 10 episodes). % of dense: 95% bootstrap interval over seeds. Params and "
             "FLOPs: actor and critics, relative to dense. Paper: RLx2's Table 1 (3M steps) "
             "where the sparsity is the paper's.", ""]
    for key, rows in rows_of(runs).items():
        lines += env_table(key, rows, rng)
    return "\n".join(lines)


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
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    args = parse_args(argv)
    runs = [r for r in plan_runs(args.plan, args.steps, args.seeds, args.out)
            if args.only is None or re.search(args.only, str(r.run_dir))]
    return drive(runs, args, print_plan, execute, tables, args.out / "table.md")


if __name__ == "__main__":
    raise SystemExit(main())
