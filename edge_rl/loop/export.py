"""`edge-rl export`: the best-evaluated actor network of a run, as a verified policy file.

`--edgetpu` writes a fully integer file for Coral's Edge TPU, to be compiled with
edgetpu_compiler (see docs/coral.md); it is verified here on the CPU.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import lzma
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edge_rl.agents import get_algorithm
from edge_rl.algorithm import resolve_defaults
from edge_rl.config import EXPORT_PRECISIONS, TrainConfig
from edge_rl.device.envs import describe_env
from edge_rl.device.errors import UserError
from edge_rl.device.evaluate import EVAL_SEED, evaluate
from edge_rl.device.policy import Policy
from edge_rl.device.policy_file import PolicyFileError, pack_policy, read_policy_metadata
from edge_rl.runs.best_policy import GREEDY_ROWS, evenly_spaced
from edge_rl.runs.checkpoint import write_bytes

logger = logging.getLogger(__name__)

XZ_EXPORT_PRESET = 9 | lzma.PRESET_EXTREME  # exports are written once: squeeze hard


def export_run(run_dir: Path, precisions: Sequence[str], output: str | None,
               verify_episodes: int = 5, force: bool = False,
               report: Callable[[str], None] = logger.info) -> None:
    """Convert, check against fp32 and write each of `precisions`, passing the report's lines
    to `report` as each file is written. The run is loaded and calibrated once for all of
    them. A policy outside the tolerances (edge_rl.converters.verify) is refused and nothing
    written for it, unless `force`; the others are still made, and then ExportRefused names
    every refusal."""
    for precision in precisions:
        check_precision(precision)
    if output and len(precisions) > 1:
        raise UserError("-o names one file: give it with one precision, or leave it out to "
                        "write each to its default name in RUN_DIR")
    exporter = RunExport(run_dir, verify_episodes)
    refused = []
    for precision in precisions:
        try:
            lines = exporter.write(precision, output, force)
        except ExportRefused as err:
            refused.append(str(err))
            continue
        for line in lines:
            report(line)
    if refused:
        raise ExportRefused("; ".join(refused))


def check_precision(precision: str) -> None:
    if precision != "tflm" and precision not in EXPORT_PRECISIONS:
        raise UserError(f"unknown precision {precision!r}")


class RunExport:
    """A run's best-evaluated actor, ready to be written at any precision: its network, its
    fp32 file (the reference every other precision is checked against) and the calibration
    rows: the run's saved ones and holdout, and the states of fp32's greedy episodes."""

    def __init__(self, run_dir: Path, verify_episodes: int = 5):
        if verify_episodes < 0:
            raise UserError("--verify-episodes must not be negative")
        if not run_dir.is_dir():
            raise UserError(f"no run directory at {run_dir}")
        best = run_dir / "best"
        if not (best / "policy.tflite").is_file():
            raise UserError(f"{run_dir} has no evaluated policy yet (train it first)")
        self.run_dir, self.verify_episodes = run_dir, verify_episodes
        config = TrainConfig.load(run_dir / "config.json")
        factory = get_algorithm(config.algo)
        observation, action = describe_env(config.env)
        self.config = resolve_defaults(factory, config, observation, action)

        from edge_rl.loop.learner import Learner

        self.learner = Learner(factory, self.config, observation, action)
        self.learner.restore_actor(best)
        self.published = read_policy_metadata((best / "policy.tflite").read_bytes())
        with np.load(best / "observations.npz") as saved:
            calibration, self.holdout = saved["calibration"], saved["holdout"]
        if len(self.holdout) == 0:  # best kept before replay held any observation
            self.holdout = calibration
        self.fp32 = self.build("fp32", None)
        self.reference = Policy(self.fp32)
        # fp32's greedy episodes: where the policy goes, to calibrate on
        calibration_episodes = evaluate(self.reference, self.config.env,
                                        episodes=CALIBRATION_EPISODES, seed=CALIBRATION_SEED,
                                        keep_observations=True)
        self.rows = np.concatenate([calibration, self.holdout, evenly_spaced(
            calibration_episodes.observations, GREEDY_ROWS)])
        self._reference_episodes = None

    def build(self, p: str, rows: np.ndarray | None, sparse_encoding: bool = False,
              scale_units: bool = False) -> bytes:
        from edge_rl.converters import convert
        from edge_rl.converters.patch import policy_file

        meta = self.learner.metadata(p, self.published.policy_version, self.config.env)
        meta = dataclasses.replace(meta, train_step=self.published.train_step)
        model = self.learner.built.export_model
        try:
            if p == "int8" and not sparse_encoding:  # as the learner publishes it
                return policy_file(model, p, rows, meta, scale_units)
            return convert(model, p, rows, meta, sparse_encoding)
        except ValueError as err:  # a network this precision cannot express (an op, a tensor)
            raise UserError(f"cannot export {p}: {_first_line(err)}") from None

    def write(self, precision: str, output: str | None, force: bool = False) -> list[str]:
        """The policy at `precision` ("tflm": int8 as C source for TFLite Micro), checked
        and written to `output` (default: in the run folder); the report's lines. An int8 file
        that fails its check is made again with its last int8 layer's units rescaled."""
        check_precision(precision)
        tflm = precision == "tflm"  # int8 as C source for TFLite Micro (dense weights)
        if tflm:
            precision = "int8"
        model = self.fp32 if precision == "fp32" else self.build(precision, self.rows)
        candidate = Policy(model)
        if self._reference_episodes is None and self.verify_episodes:
            self._reference_episodes = evaluate(self.reference, self.config.env,
                                                episodes=self.verify_episodes,
                                                keep_observations=True)
        check = check_export(self.reference, candidate, self.holdout, self.config.env,
                             self.verify_episodes, self._reference_episodes)
        if check.failures and precision == "int8":
            # TFLite gives an int8 layer's weights one scale: try again with the last int8
            # layer's units rescaled to share it (converters.patch, `scale_units`)
            scaled = self.build(precision, self.rows, scale_units=True)
            if scaled != model:
                second = check_export(self.reference, Policy(scaled), self.holdout,
                                      self.config.env, self.verify_episodes,
                                      self._reference_episodes)
                if not second.failures:
                    note = (f"the plain int8 file failed its check ({'; '.join(check.failures)}); "
                            "written with the last int8 layer's units rescaled")
                    model, check = scaled, dataclasses.replace(
                        second, lines=[note, *second.lines])
        default_name = "policy-tflm.cc" if tflm else f"policy-{precision}.tflite"
        path = Path(output) if output else self.run_dir / default_name
        if check.failures and not force:
            raise ExportRefused(f"{precision} policy refused, nothing written: "
                                f"{'; '.join(check.failures)} (--force writes it anyway)")
        path.parent.mkdir(parents=True, exist_ok=True)
        if tflm:
            from edge_rl.converters.tflm_source import write_tflm

            try:
                written = write_tflm(model, path)
            except ValueError as err:  # an operator TFLite Micro lacks, or outputs that differ
                raise UserError(f"cannot export for TFLite Micro: {_first_line(err)}") from None
        else:
            write_bytes(path, model)
            written = [f"wrote {path}"]
        lines = [*written, *check.lines]
        if check.failures:
            lines.append(f"warning: written with --force although {'; '.join(check.failures)}")
        if tflm:
            return lines
        return lines + self.size_lines(model, precision, path)

    def size_lines(self, model: bytes, precision: str, path: Path) -> list[str]:
        """The network's sparsity and FLOPs, and the file's sizes (its compact form written
        beside it for sparse runs)."""
        lines = sparsity_lines(self.learner)
        summary = self.run_dir / "summary.json"
        if summary.is_file():  # counted by the run over all its updates
            networks = json.loads(summary.read_text()).get("networks")
            if networks and "train_flops_vs_dense" in networks:
                critic = networks["groups"].get("critic", {}).get("sparsity", "-")
                lines.append(f"FLOPs vs dense: training {networks['train_flops_vs_dense']:.3f}, "
                             f"inference {networks['inference_flops_vs_dense']:.3f}; critic "
                             f"sparsity {critic}")
        if precision == "edgetpu":
            lines += edgetpu_lines(model, path)
        fp32 = self.fp32
        if self.config.is_sparse and precision != "edgetpu":  # the Edge TPU reads dense weights
            # int8's sparse encoding is converted anew, its activation ranges the converter's
            # own, not those of the file just checked: only the float precisions offer it
            sparse_encoded = (None if precision == "int8"
                              else self.build(precision, self.rows, sparse_encoding=True))
            compact, how = smallest_loadable(model, sparse_encoded, precision)
            compact_path = path.with_name(path.name + (".xz" if how.startswith("xz")
                                                       else "-sparse"))
            if compact is not model:
                write_bytes(compact_path, compact)
                lines.append(f"wrote {compact_path} ({how})")
            lines.append(size_line(model, compact, how, fp32, precision))
        else:
            lines.append(f"size: {len(model)} bytes; dense fp32 {len(fp32)} bytes "
                         f"({len(fp32) / len(model):.1f}x)")
        return lines


CALIBRATION_EPISODES = 5  # fp32 greedy episodes whose states join the calibration rows
CALIBRATION_SEED = 2_000_000  # their reset seeds (the check's episodes use evaluate's own)


class ExportRefused(UserError):
    """The quantized policy falls outside the tolerances against fp32 (exit code 1)."""

    exit_code = 1


@dataclasses.dataclass
class ExportCheck:
    lines: list[str]  # the report
    failures: list[str]  # what falls outside the tolerances; [] when none does


def check_export(reference: Policy, candidate: Policy, holdout: np.ndarray, env_id: str,
                 episodes: int, reference_episodes: Any = None) -> ExportCheck:
    """The exported policy against fp32 of the same weights: greedy actions on the run's
    held-out observations (the tolerances), the same on the states of fp32's greedy episodes
    (reported: near-ties the policy meets itself), and the greedy returns of both over the
    same reset seeds (`episodes` of them, the tolerance; 0 skips the episodes).
    `reference_episodes`: fp32's EvalResult of those episodes, if already run."""
    from edge_rl.converters import compare_policies, verification_report
    from edge_rl.converters.verify import confirmed_return_gap, tolerance_failures

    comparison = compare_policies(reference, candidate, holdout)
    lines = [verification_report(comparison, candidate, reference)]
    failures = tolerance_failures(comparison)
    if episodes:
        fp32_result = reference_episodes or evaluate(reference, env_id, episodes=episodes,
                                                     keep_observations=True)
        result = evaluate(candidate, env_id, episodes=episodes)
        on_greedy_states = compare_policies(reference, candidate, fp32_result.observations)
        lines.append("on the states of fp32's greedy episodes: " + verification_report(
            on_greedy_states, candidate).splitlines()[1].strip())
        for name, returns in (("fp32", fp32_result.returns),
                              (candidate.metadata.precision, result.returns)):
            lines.append(f"greedy return ({name}): {np.mean(returns):.2f} ± "
                         f"{np.std(returns):.2f} over {episodes} episodes")

        def play_more(first: int, count: int) -> tuple[list[float], list[float]]:
            seed = EVAL_SEED + first  # the seeds after those played
            more = (evaluate(reference, env_id, episodes=count, seed=seed).returns,
                    evaluate(candidate, env_id, episodes=count, seed=seed).returns)
            lines.append(f"a return gap over {first} episodes: played {count} more of each "
                         f"(fp32 {np.mean(more[0]):.2f}, {candidate.metadata.precision} "
                         f"{np.mean(more[1]):.2f})")
            return more

        gap = confirmed_return_gap(fp32_result.returns, result.returns, play_more)
        if gap:
            failures.append(gap)
    return ExportCheck(lines, failures)


def edgetpu_lines(model: bytes, path: Path) -> list[str]:
    """What may still run on the CPU once compiled, and how to compile."""
    from edge_rl.converters.edgetpu import cpu_fallback_notes

    notes = [f"note: {note}" for note in cpu_fallback_notes(model)]
    compiled = path.with_name(path.stem + "_edgetpu" + path.suffix)
    return [*notes, f"next: edgetpu_compiler {path} (on an x86-64 Debian/Ubuntu machine) "
                    f"writes {compiled.name}; run it with "
                    f"`edge-rl eval {compiled.name} --delegate edgetpu`"]


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def sparsity_lines(learner: Any) -> list[str]:
    """The exported network's layers: active weights of each kernel."""
    from edge_rl.sparse.accounting import layer_counts

    counts = layer_counts(learner.built.actor_network)
    lines = [f"  {c['layer']} {c['shape']}: {c['active']} of {c['shape'][0] * c['shape'][1]} "
             f"weights ({c['sparsity']:.1%} sparse)" for c in counts]
    total = sum(c["shape"][0] * c["shape"][1] for c in counts)
    active = sum(c["active"] for c in counts)
    return [f"actor network: {1 - active / total:.1%} sparse", *lines]


def smallest_loadable(model: bytes, sparse_encoded: bytes | None, precision: str
                      ) -> tuple[bytes, str]:
    """The smallest form of a sparse policy that the device runtime loads: the file, TFLite's
    sparse encoding (when given), or either one xz-compressed."""
    candidates = [(model, precision),
                  (pack_policy(model, XZ_EXPORT_PRESET), f"xz of the {precision} file")]
    if sparse_encoded is not None:
        candidates += [(sparse_encoded, "TFLite sparse encoding"),
                       (pack_policy(sparse_encoded, XZ_EXPORT_PRESET),
                        "xz of the TFLite sparse encoding")]
    for data, how in sorted(candidates, key=lambda c: len(c[0])):
        try:
            Policy(data)
        except PolicyFileError:
            continue
        return data, how
    return model, precision


def size_line(model: bytes, compact: bytes, how: str, fp32: bytes, precision: str) -> str:
    """File sizes against dense fp32; for int8, the entropy bound of its weights too (its
    measure counts float weights at 32 bits: meant for int8 files)."""
    from edge_rl.converters.size import entropy_bound_bytes

    line = (f"size: {precision} {len(model)} bytes, {how} {len(compact)} bytes: "
            f"{len(fp32) / len(compact):.1f}x smaller than dense fp32 ({len(fp32)} bytes)")
    if precision == "int8":
        bound = entropy_bound_bytes(model)
        line += (f"; entropy bound of the int8 masks and values {bound} bytes "
                 f"({len(fp32) / bound:.1f}x)")
    return line
