"""The `edge-rl` command line. TensorFlow is imported only inside the commands that need it.

User mistakes (bad flags, unknown envs, missing or corrupt files) print one line and exit 2.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import textwrap
from pathlib import Path
from typing import Any

import click
from tqdm import tqdm

from edge_rl.cli_run import ALGORITHM_EPILOG, ALGORITHM_FLAGS, run_config, run_options
from edge_rl.device.accounting import DEFAULT_CPU_WATTS
from edge_rl.device.bench import bench, echo_table
from edge_rl.device.errors import PolicyFileError, UserError

# edge_rl.device.link.BACKOFF_MAX, written out: importing the link here would load gRPC for
# every command (tests/test_spool.py holds the two equal)
RECONNECT_MAX = 15.0


class TqdmHandler(logging.Handler):
    """Log lines printed above the progress bar instead of through it."""

    def emit(self, record: logging.LogRecord) -> None:
        tqdm.write(self.format(record), file=sys.stderr)


def setup_logging(verbose: bool) -> None:
    handler = TqdmHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("absl", "tensorflow", "h5py"):
        logging.getLogger(noisy).setLevel(logging.ERROR)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="edge-rl")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def cli(verbose: bool) -> None:
    """edge-rl: train RL policies with int8 actors and sparse networks; run them on boards."""
    setup_logging(verbose)


def report_summary(summary: dict) -> None:
    best = summary["best_return"]
    click.echo(json.dumps(summary, indent=2))
    if best:
        heldout = summary.get("best_return_heldout")
        elsewhere = (f", {heldout['mean']:.1f} ± {heldout['std']:.1f} on as many other episodes"
                     if heldout else "")
        click.echo(
            f"best greedy return {best['mean']:.1f} ± {best['std']:.1f} "
            f"({best['episodes']} episodes{elsewhere}); policy: {summary['policy_file']}"
        )


@cli.command(context_settings=ALGORITHM_FLAGS, epilog=ALGORITHM_EPILOG)
@run_options
@click.pass_context
def train(ctx: click.Context, resume: bool, config_file: str | None, **flags) -> None:
    """Train a policy: a TF-Agents learner with actors exploring over gRPC."""
    from edge_rl.loop.train import run_training

    config = run_config(resume, config_file, flags, ctx.args)
    report_summary(run_training(config, resume=resume))


@cli.command()
@click.argument("names", nargs=-1)
def algorithms(names: tuple[str, ...]) -> None:
    """The algorithms (or those NAMES): the training flags they set, and their own options,
    with defaults."""
    from edge_rl.agents import algorithm_names, get_algorithm
    from edge_rl.algorithm import SPARSE_DEFAULTS, option_flags

    for name in names or algorithm_names():
        factory = get_algorithm(name)
        defaults = dataclasses.asdict(factory.Options())
        kinds = " and ".join(sorted(factory.action_kinds))
        click.echo(f"{factory.name} ({kinds} actions)")
        click.echo(_as_flags("  sets: ", factory.defaults))
        when_sparse = {name: value for name, value in SPARSE_DEFAULTS.items()
                       if factory.defaults.get(name, value) != value}
        if when_sparse:
            click.echo(_as_flags("  sparse (--sparsity, --tiny): ", when_sparse))
        on_images = {**getattr(factory, "image_defaults", {}),
                     **getattr(factory, "image_options", {})}
        if on_images:
            click.echo(_as_flags("  on images: ", on_images))
        for flag, (field, _, help_text) in option_flags(factory).items():
            click.echo(f"  {flag} [{defaults[field]}]  {help_text}")


def _as_flags(heading: str, values: dict[str, Any]) -> str:
    """`values` as the flags that would set them (--hidden=64,64 --learning-rate=0.001),
    wrapped under `heading`."""
    flags = [f"--{name.replace('_', '-')}="
             + (",".join(map(str, value)) if isinstance(value, tuple) else str(value))
             for name, value in values.items()]
    return textwrap.fill(" ".join(flags), 79, initial_indent=heading,
                         subsequent_indent=" " * len(heading), break_on_hyphens=False,
                         break_long_words=False)


@cli.command(context_settings=ALGORITHM_FLAGS, epilog=ALGORITHM_EPILOG)
@run_options
@click.option("--host", help="Address to listen on; 0.0.0.0 for every interface. "
                             "[default: 127.0.0.1]")
@click.option("--token-file", type=click.Path(),
              help="File of tokens actors must present, one per line.")
@click.option("--tls-cert", type=click.Path(), help="PEM certificate: serve over TLS.")
@click.option("--tls-key", type=click.Path(), help="PEM private key of --tls-cert.")
@click.option("--insecure", is_flag=True, default=None,
              help="Allow a non-loopback --host without --token-file.")
@click.option("--actor-timeout", type=float,
              help="Seconds of silence before an actor counts as gone.  [default: 15]")
@click.pass_context
def learner(ctx: click.Context, resume: bool, config_file: str | None, **flags) -> None:
    """Run a learner that waits for actors on other machines (`edge-rl actor`)."""
    from edge_rl.loop.train import run_training

    if flags.get("actors") is None and not resume and not config_file:
        flags["actors"] = 0  # the fleet brings the actors; --actors N adds local ones
    config = run_config(resume, config_file, flags, ctx.args)
    if config.port == 0:
        raise UserError("a learner needs a fixed --port for its actors to find it")
    if config.token_file:
        from edge_rl.transport.server import accepted_tokens

        accepted_tokens(config.token_file)  # a bad token file fails now, not after TF loads
    report_summary(run_training(config, resume=resume))


@cli.command()
@click.argument("run_dir", type=click.Path())
@click.option("--int8", is_flag=True, help="Full-integer int8 (the default).")
@click.option("--fp16", is_flag=True, help="float16 weights.")
@click.option("--fp32", is_flag=True, help="float32.")
@click.option("--edgetpu", is_flag=True,
              help="int8 throughout, input and output included, for Coral's Edge TPU: "
                   "compile the file with edgetpu_compiler (see docs/coral.md).")
@click.option("--tflm", is_flag=True,
              help="int8 with dense weights as C source and header for TFLite Micro "
                   "(docs/microcontrollers.md).")
@click.option("-o", "--output", type=click.Path(),
              help="Output file, with one precision.  [default: RUN_DIR/policy-PRECISION.tflite, "
                   "or RUN_DIR/policy-tflm.cc and .h]")
@click.option("--verify-episodes", type=int, default=5, show_default=True,
              help="Greedy episodes to compare the fp32 and exported policies on.")
@click.option("--force", is_flag=True,
              help="Write the file even when it falls outside the tolerances against fp32.")
def export(run_dir: str, int8: bool, fp16: bool, fp32: bool, edgetpu: bool, tflm: bool,
           output: str | None, verify_episodes: int, force: bool) -> None:
    """Export the best-evaluated actor network of a run as a TFLite policy file, at each
    precision given (several in one call load the run once).

    Each file is checked against fp32 of the same weights (greedy actions on the run's newest
    observations and on fp32's greedy episodes, and greedy returns) and refused, exit code 1
    and nothing written for it, when it falls outside the tolerances (README: export)."""
    from edge_rl.loop.export import export_run

    chosen = [name for name, given in (("int8", int8), ("fp16", fp16), ("fp32", fp32),
                                       ("edgetpu", edgetpu), ("tflm", tflm)) if given]
    export_run(Path(run_dir), chosen or ["int8"], output, verify_episodes, force,
               report=click.echo)


@cli.command(name="eval")
@click.argument("policy_file", type=click.Path())
@click.option("--env", help="Env id.  [default: the one in the policy's metadata]")
@click.option("--episodes", type=int, default=20, show_default=True)
@click.option("--seed", type=int, default=1_000_000, show_default=True,
              help="Episode i resets with seed + i.")
@click.option("--runtime", type=click.Choice(["ai_edge_litert", "tflite_runtime"]),
              help="Force a TFLite runtime.  [default: ai_edge_litert if installed]")
@click.option("--delegate", type=click.Choice(["edgetpu"]),
              help="Run the network through a delegate: edgetpu loads Coral's libedgetpu "
                   "(for files compiled with edgetpu_compiler).  [default: none, the CPU]")
def eval_command(policy_file: str, env: str | None, episodes: int, seed: int,
                 runtime: str | None, delegate: str | None) -> None:
    """Run a policy file greedily (device runtime only, no TensorFlow)."""
    from edge_rl.device.evaluate import evaluate
    from edge_rl.device.policy import load_policy
    from edge_rl.device.runtime import delegate_library, load_runtime

    if episodes <= 0:
        raise UserError("--episodes must be positive")
    policy = load_policy(policy_file, runtime=load_runtime(runtime), delegate=delegate)
    meta = policy.metadata
    result = evaluate(policy, env, episodes=episodes, seed=seed)
    click.echo(f"policy: {meta.algo} for {meta.env_id}, {meta.precision}, "
               f"version {meta.policy_version}, trained {meta.train_step} updates")
    click.echo(f"runtime: {policy.runtime}")
    click.echo(f"delegate: {delegate} ({delegate_library(delegate)})" if delegate
               else "delegate: none (CPU)")
    click.echo(f"return: {result.mean:.2f} ± {result.std:.2f} over {episodes} episodes")
    click.echo(f"median inference latency: {result.median_latency_us:.1f} µs")


def tf_agents_policy(data: bytes, previous: Any = None) -> Any:
    """A TF-Agents policy sent to this actor (--actor-precision tf-fp32): TensorFlow runs it,
    imported only now (edge_rl.device.policy.register_published_format)."""
    try:
        from edge_rl.tf_policy import TFAgentsPolicy
    except ImportError as err:
        raise PolicyFileError(
            "the learner publishes TF-Agents policies (--actor-precision tf-fp32, the framework "
            f"baseline); acting with them needs TensorFlow: pip install 'edge-rl[train]' ({err})"
        ) from None
    return TFAgentsPolicy(data, previous)


@cli.command()
@click.option("--learner", required=True, help="HOST:PORT of the learner's gRPC service.")
@click.option("--token-file", type=click.Path(), help="File holding this actor's token.")
@click.option("--tls-ca", type=click.Path(),
              help="PEM certificate(s) to trust: talk TLS to the learner.")
@click.option("--spool", type=click.Path(),
              help="Folder for unacked batches, the actor's id and its next seq; survives "
                   "restarts.  [default: in memory]")
@click.option("--spool-max-mb", type=float, default=256.0, show_default=True,
              help="Spool budget; when full, the oldest batches are dropped.")
@click.option("--actor-id", default=None,
              help="Stable id of this actor.  [default: the spool's, else hostname-pid]")
@click.option("--max-steps", type=int, help="Stop after this many env steps.")
@click.option("--cpu-watts", type=float, default=DEFAULT_CPU_WATTS, show_default=True,
              help="Power per busy core for the energy this actor reports with its batches "
                   "(its CPU seconds times this; a Raspberry Pi 4 core is ~1.5 W).")
@click.option("--reconnect-max", type=float, default=RECONNECT_MAX, show_default=True,
              help="Longest wait in seconds between tries to reach a lost learner (the waits "
                   "double from 0.5 s up to it, times a random 0.5-1.5).")
@click.option("--print-systemd-unit", is_flag=True,
              help="Print a systemd unit that runs this actor at boot and restarts it, then "
                   "exit (see docs/raspberry-pi.md).")
@click.option("--parent-pid", type=int, hidden=True)
def actor(learner: str, token_file: str | None, tls_ca: str | None, spool: str | None,
          spool_max_mb: float, actor_id: str | None, max_steps: int | None,
          cpu_watts: float, reconnect_max: float, print_systemd_unit: bool,
          parent_pid: int | None) -> None:
    """Run one actor against a learner (device runtime only, no TensorFlow)."""
    if spool_max_mb <= 0:
        raise UserError("--spool-max-mb must be positive")
    if cpu_watts < 0:
        raise UserError("--cpu-watts must not be negative")
    if reconnect_max <= 0:
        raise UserError("--reconnect-max must be positive")
    if print_systemd_unit:
        from click.core import ParameterSource

        from edge_rl.device.systemd import actor_unit

        # the options given here, as given; paths absolute, since a service runs elsewhere
        ctx = click.get_current_context()
        args = []
        for name in ("learner", "token_file", "tls_ca", "spool", "spool_max_mb", "actor_id",
                     "max_steps", "cpu_watts", "reconnect_max"):
            value = ctx.params[name]
            if ctx.get_parameter_source(name) is ParameterSource.DEFAULT or value is None:
                continue
            if name in ("token_file", "tls_ca", "spool"):
                value = Path(value).expanduser().absolute()
            args += ["--" + name.replace("_", "-"), str(value)]
        click.echo(actor_unit(args, learner, has_spool=spool is not None), nl=False)
        return

    from edge_rl.device.actor import die_with_parent, run_actor
    from edge_rl.device.client import read_token
    from edge_rl.device.policy import ZIP_MAGIC, register_published_format

    register_published_format(ZIP_MAGIC, tf_agents_policy)
    if parent_pid is not None:
        die_with_parent(parent_pid)
    try:
        # A local actor's CPU is its learner's child's: the learner counts it, not the actor.
        run_actor(learner, actor_id, spool=spool, spool_max_mb=spool_max_mb,
                  token=read_token(token_file), tls_ca=tls_ca, max_steps=max_steps,
                  cpu_watts=None if parent_pid is not None else cpu_watts,
                  reconnect_max=reconnect_max)
    except KeyboardInterrupt:
        pass


@cli.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--out", "out_dir", type=click.Path(), default="report", show_default=True,
              help="Folder for report.md and the PNG plots.")
@click.option("--threshold", type=float,
              help="Return to time runs to, in every env.  [default: 95% of the best "
                   "setting's final score, per env]")
@click.option("--baseline",
              help="Setting the speed-ups and ratios are against: a run directory or a "
                   "setting label such as 'td3 fp32 dense'.  [default: the fp32 dense "
                   "setting of each algorithm]")
def report(run_dirs: tuple[str, ...], out_dir: str, threshold: float | None,
           baseline: str | None) -> None:
    """Compare finished runs: return against time and env steps (PNG) and a markdown table
    of time to threshold, speed-up, final score, energy, CO2 and where the time went."""
    from edge_rl.analysis.report import build_report

    written = build_report([Path(d) for d in run_dirs], Path(out_dir), threshold=threshold,
                           baseline=baseline)
    for path in written:
        click.echo(str(path))


@cli.command()
@click.argument("learner")
@click.option("--token-file", type=click.Path(), help="File holding a token the learner accepts.")
@click.option("--tls-ca", type=click.Path(), help="PEM certificate(s) to trust: talk TLS.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(learner: str, token_file: str | None, tls_ca: str | None, as_json: bool) -> None:
    """Show a learner's run, step and policy version, and its actors (LEARNER is HOST:PORT)."""
    import grpc
    from google.protobuf.json_format import MessageToDict

    from edge_rl.device.client import LearnerClient, read_token

    client = LearnerClient(learner, token=read_token(token_file), tls_ca=tls_ca)
    try:
        reply = client.status()
    except grpc.RpcError as err:
        raise UserError(f"learner at {learner}: {err.code().name}: {err.details()}") from None
    finally:
        client.close()
    if as_json:
        click.echo(json.dumps(MessageToDict(reply, preserving_proto_field_name=True,
                                            including_default_value_fields=True), indent=2))
        return
    click.echo(f"run {reply.run_id}: {reply.algo} on {reply.env_id}, {reply.env_steps} env "
               f"steps, {reply.learner_updates} updates, policy v{reply.policy_version}, "
               f"up {reply.uptime_seconds:.0f} s, {reply.batches_refused} inserts refused")
    header = ("actor", "host", "policy", "steps/s", "last seen", "spooled", "rejected",
              "dropped", "inserted")
    rows = [header] + [
        (a.actor_id, a.host or "-", f"v{a.policy_version}", f"{a.steps_per_second:.0f}",
         "gone" if a.gone else f"{a.seconds_since_seen:.1f} s ago", str(a.batches_spooled),
         str(a.batches_rejected), str(a.batches_dropped), str(a.batches_inserted))
        for a in reply.actors
    ]
    echo_table(rows)


cli.add_command(bench)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.exceptions.Abort:
        click.echo("edge-rl: aborted", err=True)
        sys.exit(130)
    except click.ClickException as err:
        click.echo(f"edge-rl: error: {err.format_message()}", err=True)
        sys.exit(2)
    except UserError as err:
        click.echo(f"edge-rl: error: {err}", err=True)
        sys.exit(getattr(err, "exit_code", 2))


if __name__ == "__main__":
    main()
