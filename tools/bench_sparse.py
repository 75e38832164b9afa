"""RLx2's comparison on this machine: TD3 on HalfCheetah-v5 with 90%/85% sparse networks.

One run directory per method and seed under --out; finished runs are skipped, interrupted ones
resumed from their last checkpoint, so the driver can be stopped and started again. It prints
the estimated total time first, then trains, exports each run's int8 policy, and writes the
paper-style table (score = mean of the last 10 evaluations, as % of dense with a 95% bootstrap
interval over seeds; parameters, training and inference FLOPs and the int8 file relative to
dense).

    python tools/bench_sparse.py --steps 100000 --seeds 0 1 2          # everything
    python tools/bench_sparse.py --table-only                           # the table so far

Methods (RLx2, Table 1): dense; tiny (dense, as many parameters as the sparse nets); static
(a fixed random mask); SET; RigL; RLx2 (RigL + delayed 3-step targets + dynamic replay).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

EDGE_RL = str(Path(sys.executable).parent / "edge-rl")
METHODS = {
    "dense": [],
    "tiny": ["--tiny"],
    "static": ["--topology", "static"],
    "set": ["--topology", "set"],
    "rigl": ["--topology", "rigl"],
    "rlx2": ["--topology", "rigl", "--rlx2"],
}
SPARSE = ("tiny", "static", "set", "rigl", "rlx2")  # methods that take the sparsity flags
LAST_EVALUATIONS = 10
GUESS_STEPS_PER_SECOND = 230  # TD3 on HalfCheetah here, before any run has finished


def finished(run: Path) -> dict | None:
    summary = run / "summary.json"
    if not summary.is_file():
        return None
    doc = json.loads(summary.read_text())
    return doc if doc.get("stop_reason", "").startswith("reached") else None


def train_command(args, method: str, seed: int, run: Path) -> list[str]:
    command = [EDGE_RL, "train", "--algo", "td3", "--env", args.env, "--steps", str(args.steps),
               "--seed", str(seed), "--out", str(run), "--eval-every", str(args.eval_every),
               "--eval-episodes", str(args.eval_episodes),
               "--topology-interval", str(args.topology_interval)]
    if method in SPARSE:
        command += ["--sparsity", str(args.sparsity), "--critic-sparsity",
                    str(args.critic_sparsity)]
    command += METHODS[method]
    if (run / "checkpoints" / "latest").is_file():
        command.append("--resume")
    return command


def run_all(args) -> None:
    todo = [(m, s) for s in args.seeds for m in args.methods  # seed by seed: a table early
            if finished(args.out / f"{m}-{s}") is None]
    done = [finished(args.out / f"{m}-{s}") for s in args.seeds for m in args.methods]
    rates = [d["steps"] / d["wall_clock_seconds"] for d in done if d]
    rate = float(np.median(rates)) if rates else GUESS_STEPS_PER_SECOND
    per_run = args.steps / rate + 30  # + start-up and export
    print(f"{len(todo)} of {len(args.methods) * len(args.seeds)} runs to do, about "
          f"{per_run / 60:.0f} min each at {rate:.0f} env steps/s: "
          f"~{len(todo) * per_run / 3600:.1f} h in all", flush=True)
    for method, seed in todo:
        run = args.out / f"{method}-{seed}"
        start = time.monotonic()
        print(f"[{time.strftime('%H:%M')}] {method} seed {seed} -> {run}", flush=True)
        log = args.out / f"{method}-{seed}.log"
        run.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as out:
            code = subprocess.call(train_command(args, method, seed, run), stdout=out,
                                   stderr=subprocess.STDOUT)
            # the int8 policy (and its packed form); dense also in fp32, the size baseline
            for precision in ("int8", "fp32") if method == "dense" else ("int8",):
                if code == 0:
                    code = subprocess.call([EDGE_RL, "export", str(run), f"--{precision}",
                                            "--verify-episodes", "0"], stdout=out,
                                           stderr=subprocess.STDOUT)
        if code != 0:
            sys.exit(f"{method} seed {seed} failed (exit {code}); see {log}")
        print(f"    done in {(time.monotonic() - start) / 60:.1f} min", flush=True)


def score(summary: dict) -> float:
    returns = [e["mean"] for e in summary["evaluations"]]
    return float(np.mean(returns[-LAST_EVALUATIONS:]))


def bootstrap_ratio(values: list[float], dense: list[float], rng, samples: int = 10_000
                    ) -> tuple[float, float]:
    """95% interval of mean(values) / mean(dense), resampling seeds of each."""
    values, dense = np.asarray(values), np.asarray(dense)
    a = rng.choice(values, (samples, len(values))).mean(axis=1)
    b = rng.choice(dense, (samples, len(dense))).mean(axis=1)
    ratios = 100 * a / b
    return float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def policy_bytes(run: Path) -> tuple[int, int]:
    plain = run / "policy-int8.tflite"
    packed = run / "policy-int8.tflite.xz"
    size = plain.stat().st_size if plain.is_file() else 0
    return size, packed.stat().st_size if packed.is_file() else size


def table(args) -> str:
    rng = np.random.default_rng(0)
    runs = {m: {s: finished(args.out / f"{m}-{s}") for s in args.seeds} for m in args.methods}
    runs = {m: {s: d for s, d in by_seed.items() if d} for m, by_seed in runs.items()}
    if not runs.get("dense"):
        return "no finished dense run yet: nothing to compare with"
    dense_scores = [score(d) for d in runs["dense"].values()]
    dense_ref = next(iter(runs["dense"].values()))
    dense_params = sum(g["nonzero_parameters"] for g in dense_ref["networks"]["groups"].values())
    dense_train = dense_ref["networks"]["train_flops"] / dense_ref["updates"]
    dense_infer = dense_ref["networks"]["inference_flops"]
    dense_run = args.out / f"dense-{next(iter(runs['dense']))}"
    dense_file = policy_bytes(dense_run)[0]
    dense_fp32 = (dense_run / "policy-fp32.tflite").stat().st_size
    lines = [
        f"TD3 {args.env}, {args.steps} env steps, actor/critic sparsity "
        f"{args.sparsity}/{args.critic_sparsity}; score = mean of the last "
        f"{LAST_EVALUATIONS} evaluations ({args.eval_episodes} episodes each, every "
        f"{args.eval_every} steps)",
        "",
        "| method | seeds | score (mean ± sd) | % of dense [95% CI] | params | train FLOPs | "
        "infer FLOPs | int8 file | sent and stored (vs dense fp32) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, by_seed in runs.items():
        if not by_seed:
            continue
        scores = [score(d) for d in by_seed.values()]
        ref = next(iter(by_seed.values()))
        groups = ref["networks"]["groups"]
        params = sum(g["nonzero_parameters"] for g in groups.values()) / dense_params
        train = ref["networks"]["train_flops"] / ref["updates"] / dense_train
        infer = ref["networks"]["inference_flops"] / dense_infer
        plain, packed = policy_bytes(args.out / f"{method}-{next(iter(by_seed))}")
        plain = plain or dense_file
        percent = 100 * np.mean(scores) / np.mean(dense_scores)
        low, high = bootstrap_ratio(scores, dense_scores, rng)
        lines.append(
            f"| {method} | {len(scores)} | {np.mean(scores):.0f} ± {np.std(scores):.0f} | "
            f"{percent:.1f} [{low:.1f}, {high:.1f}] | {params:.3f} | {train:.3f} | "
            f"{infer:.3f} | {plain / 1024:.1f} KiB | {packed / 1024:.1f} KiB "
            f"({dense_fp32 / max(packed, 1):.1f}x < fp32) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench_sparse"))
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--sparsity", type=float, default=0.9)
    parser.add_argument("--critic-sparsity", type=float, default=0.85)
    parser.add_argument("--eval-every", type=int, default=5_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--topology-interval", type=int, default=10_000)
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args()
    if "dense" not in args.methods:
        args.methods.insert(0, "dense")
    if not args.table_only:
        run_all(args)
    text = table(args)
    print(text)
    (args.out / "table.md").parent.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
