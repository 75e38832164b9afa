"""`edge-rl bench`: the diagnostics a board's user runs, with the base install only.

    edge-rl bench latency POLICY_FILE              batch-1 inference time
    edge-rl bench footprint POLICY_FILE            an actor's peak memory and first action
    edge-rl bench input-quantization POLICY_FILE   an int8 input grid on the env's observations

Each prints a small table, or JSON with --json. The work is in bench_latency, bench_footprint
(with bench_learner) and bench_input; this module only holds the commands, which import them
when they run, so `edge-rl --help` stays quick.
"""

from __future__ import annotations

import json

import click

from edge_rl.device.runtime import RUNTIMES

POLICY_FILE = click.argument("policy_file", metavar="POLICY_FILE", type=click.Path())
JSON_OPTION = click.option("--json", "as_json", is_flag=True,
                           help="Print the figures as JSON instead of a table.")


def echo_table(rows: list[tuple[str, ...]], right: bool = False) -> None:
    """Rows of cells in columns as wide as their widest cell, left-aligned (or `right`)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = (c.rjust(w) if right else c.ljust(w) for c, w in zip(row, widths, strict=True))
        click.echo("  ".join(cells).rstrip())


def echo_json(data: dict) -> None:
    click.echo(json.dumps(data, indent=2))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def bench() -> None:
    """Measure a policy file on this machine (device runtime only, no TensorFlow)."""


@bench.command()
@POLICY_FILE
@click.option("--threads", type=int, default=1, show_default=True,
              help="Interpreter threads (an actor uses 1).")
@click.option("--invokes", type=int, default=1000, show_default=True,
              help="Timed calls, each of one observation.")
@click.option("--warmup", type=int, default=100, show_default=True,
              help="Untimed calls first.")
@click.option("--runtime", type=click.Choice(list(RUNTIMES)),
              help="Force a TFLite runtime.  [default: ai_edge_litert if installed]")
@click.option("--delegate", type=click.Choice(["edgetpu"]),
              help="Run the network through a delegate (see `edge-rl eval`).  "
                   "[default: none, the CPU]")
@JSON_OPTION
def latency(policy_file: str, threads: int, invokes: int, warmup: int, runtime: str | None,
            delegate: str | None, as_json: bool) -> None:
    """Inference latency of POLICY_FILE: batch-1 calls through the device runtime, in µs."""
    from edge_rl.device.bench_latency import measure_latency

    result = measure_latency(policy_file, threads=threads, invokes=invokes, warmup=warmup,
                             runtime=runtime, delegate=delegate)
    if as_json:
        echo_json(result.as_dict())
        return
    echo_table([
        ("policy", f"{result.policy} ({result.bytes} bytes: {result.algo} for {result.env_id}, "
                   f"{result.precision})"),
        ("runtime", f"{result.runtime}, {result.threads} thread"
                    f"{'s' if result.threads > 1 else ''}, "
                    f"delegate {result.delegate or 'none (CPU)'}"),
        ("invokes", f"{result.invokes} (after {result.warmup} untimed)"),
        ("median", f"{result.median_us:.1f} µs"),
        ("p90", f"{result.p90_us:.1f} µs"),
        ("p99", f"{result.p99_us:.1f} µs"),
        ("mean", f"{result.mean_us:.1f} µs (min {result.min_us:.1f}, max {result.max_us:.1f})"),
    ])


@bench.command()
@click.argument("policy_file", metavar="[POLICY_FILE]", required=False, type=click.Path())
@click.option("--learner", help="HOST:PORT of a running learner to join instead of serving "
                                "POLICY_FILE (the bench waits for its first policy).")
@click.option("--token-file", type=click.Path(), help="File holding a token --learner accepts.")
@click.option("--tls-ca", type=click.Path(), help="PEM certificate(s) to trust: talk TLS.")
@click.option("--steps", type=int, default=2000, show_default=True,
              help="Env steps the actor takes.")
@click.option("--max-rss-mb", type=float, help="Exit 1 when the peak RSS reaches this.")
@click.option("--max-first-action-s", type=float,
              help="Exit 1 when the first action comes this late.")
@click.option("--chroot", type=click.Path(file_okay=False),
              help="Run the actor inside this root (e.g. an arm64 one under qemu; needs root).")
@click.option("--chroot-edge-rl", default="/opt/edge-rl/bin/edge-rl", show_default=True,
              help="The edge-rl command inside --chroot.")
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Seconds the actor may run.")
@click.option("--wait", type=float, default=180.0, show_default=True,
              help="Seconds to wait for --learner's first policy.")
@JSON_OPTION
def footprint(policy_file: str | None, learner: str | None, token_file: str | None,
              tls_ca: str | None, steps: int, max_rss_mb: float | None,
              max_first_action_s: float | None, chroot: str | None, chroot_edge_rl: str,
              timeout: float, wait: float, as_json: bool) -> None:
    """An `edge-rl actor` process's peak memory, time to its first action and steps/s.

    With POLICY_FILE a stand-in learner in this process serves it and acks every batch at
    once (the actor runs unpaced); with --learner the actor joins that learner, whose acks
    pace it."""
    from pathlib import Path

    from edge_rl.device.bench_footprint import (
        BenchFailed,
        Chroot,
        measure_footprint,
        missed_targets,
    )

    result = measure_footprint(
        policy_file, learner, token_file=token_file, tls_ca=tls_ca, steps=steps,
        chroot=Chroot(Path(chroot), chroot_edge_rl) if chroot else None, timeout=timeout,
        wait=wait)
    if as_json:
        echo_json(result.as_dict())
    else:
        updates = "-" if result.learner_updates is None else str(result.learner_updates)
        header = ("env", "where", "learner", "peak RSS", "first action", "steps/s",
                  "batches accepted", "learner updates")
        row = (result.env, result.where, result.learner, f"{result.peak_rss_mb:.1f} MB",
               f"{result.first_action_s:.2f} s", f"{result.steps_per_second:.0f}",
               str(result.batches_accepted), updates)
        echo_table([header, row])
    missed = missed_targets(result, max_rss_mb, max_first_action_s)
    if missed:
        raise BenchFailed("missed: " + "; ".join(missed))


@bench.command(name="input-quantization")
@POLICY_FILE
@click.option("--reference", type=click.Path(),
              help="The fp32 policy file of the same weights (`edge-rl export RUN_DIR --fp32`): "
                   "also measure the action error the grid causes.")
@click.option("--env", help="Env id.  [default: the one in the policy's metadata]")
@click.option("--steps", type=int, default=3000, show_default=True,
              help="Env steps of the noisy rollout whose observations are measured.")
@click.option("--noise", type=float, default=0.2, show_default=True,
              help="Exploration: Gaussian noise of this fraction of the action's half-range, "
                   "or a random discrete action with this probability.")
@click.option("--seed", type=int, default=0, show_default=True)
@JSON_OPTION
def input_quantization(policy_file: str, reference: str | None, env: str | None, steps: int,
                       noise: float, seed: int, as_json: bool) -> None:
    """How an int8 policy's input grid covers its env's observations (--edgetpu exports, and
    int8 ones made before 2026-11-23: later int8 files read observations in float32)."""
    from edge_rl.device.bench_input import measure_input_quantization

    result = measure_input_quantization(policy_file, reference, env_id=env, steps=steps,
                                        noise=noise, seed=seed)
    if as_json:
        echo_json(result.as_dict())
        return
    scales = "each feature divided by its own scale first" if result.per_feature_scales \
        else "one for all features"
    click.echo(f"{result.env_id}: {result.observations} observations; int8 input scale "
               f"{result.scale:.4g} (zero point {result.zero_point}), {scales}")
    rows = [("feature", "largest |x|", "int8 levels", "outside the grid")] + [
        (str(i), f"{x:.4g}", str(levels), f"{clipped:.2%}")
        for i, (x, levels, clipped) in enumerate(
            zip(result.largest, result.levels, result.clipped, strict=True))]
    echo_table(rows, right=True)
    for name, error in result.errors.items():
        text = (f"{error['differing']:.2%} of greedy actions differ" if "differing" in error
                else f"mean {error['mean']:.4f}, p99 {error['p99']:.3f}, max {error['max']:.3f}")
        click.echo(f"action error of {name} against the reference: {text}")
    if not result.errors:
        click.echo("(give --reference FP32_FILE for the action error the grid causes)")

