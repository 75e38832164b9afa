"""Finished runs read back and compared: settings (env, algorithm, actor precision, sparsity)
over seeds, time to a return threshold, baselines and means over seeds. `edge_rl.analysis.report`
renders what this computes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge_rl.config import TrainConfig
from edge_rl.device.errors import UserError
from edge_rl.runs.stability import late_run_stability

log = logging.getLogger(__name__)

PRECISION_ORDER = {"tf-fp32": 0, "fp32": 1, "fp16": 2, "int8": 3}  # others after these, by name
THRESHOLD_MARGIN = 0.05  # default threshold: 5% of |best final score| below the best


@dataclass
class Run:
    """One finished run: where it is, its setting and its summary.json."""

    path: Path
    env: str
    algo: str
    precision: str
    sparsity: float
    seed: int | None
    summary: dict[str, Any]
    loop: str = ""  # how the loop ran when not edge-rl's default (see loop_label)

    @property
    def evaluations(self) -> list[dict[str, Any]]:
        return self.summary["evaluations"]

    @property
    def seed_text(self) -> str:
        return "?" if self.seed is None else str(self.seed)

    @property
    def final_score(self) -> float:
        # final_return is the last evaluation; an interrupted run may not have one
        mean = (self.summary.get("final_return") or {}).get("mean")
        return float(self.evaluations[-1]["mean"] if mean is None else mean)


@dataclass
class Setting:
    """The runs (seeds) of one (env, algo, precision, sparsity)."""

    env: str
    algo: str
    precision: str
    sparsity: float
    loop: str
    runs: list[Run]

    @property
    def key(self) -> tuple[str, str, float, str]:
        """What names a baseline: the same key is looked up in every env."""
        return (self.algo, self.precision, self.sparsity, self.loop)

    @property
    def name(self) -> str:
        """'td3 int8 dense', 'td3 int8 90% sparse' or 'dqn int8 dense lockstep': the label the
        tables use."""
        sparsity = "dense" if self.sparsity == 0 else f"{round(self.sparsity * 100, 1):g}% sparse"
        return " ".join(filter(None, (self.algo, self.precision, sparsity, self.loop)))

    @property
    def label(self) -> str:
        """The name with its seeds: 'td3 int8 dense (3 seeds)' or 'td3 int8 dense, seed 0'."""
        if len(self.runs) > 1:
            return f"{self.name} ({len(self.runs)} seeds)"
        return f"{self.name}, seed {self.runs[0].seed_text}"

    def final_scores(self) -> list[float]:
        return [run.final_score for run in self.runs]

    def kept_policy_returns(self) -> tuple[list[float], list[float]]:
        """Each seed's kept (exported) policy: its best evaluation's mean, and its mean on other
        episodes (summary's best_return_heldout) where the run measured one."""
        best = [run.summary["best_return"]["mean"] for run in self.runs
                if run.summary.get("best_return")]
        heldout = [run.summary["best_return_heldout"]["mean"] for run in self.runs
                   if run.summary.get("best_return_heldout")]
        return best, heldout

    def stabilities(self) -> list[float]:
        """Each seed's late-run stability (edge_rl.runs.stability), where it has one."""
        found = [late_run_stability([e["mean"] for e in run.evaluations])
                 for run in self.runs]
        return [s["fraction"] for s in found if s is not None and s["fraction"] is not None]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"cannot read {path}: {error}") from None


def load_run(run_dir: Path) -> Run:
    """Reads a finished run: summary.json, and config.json for what older summaries lack."""
    run_dir = Path(run_dir)
    if not (run_dir / "summary.json").is_file():
        raise UserError(f"{run_dir} is not a finished run (no summary.json)")
    summary = _read_json(run_dir / "summary.json")
    config = _read_json(run_dir / "config.json") if (run_dir / "config.json").is_file() else {}

    def pick(summary_key: str, config_key: str, default: Any = None) -> Any:
        value = summary.get(summary_key)
        return config.get(config_key, default) if value is None else value

    env, algo, seed = pick("env", "env"), pick("algo", "algo"), pick("seed", "seed")
    if env is None or algo is None:
        raise UserError(f"{run_dir}: neither summary.json nor config.json names its env and algo")
    if not summary.get("evaluations"):
        raise UserError(f"{run_dir} has no evaluations (was --eval-every above --steps?)")
    return Run(path=run_dir, env=env, algo=algo,
               precision=str(pick("precision", "actor_precision", "unknown")),
               sparsity=float(pick("sparsity", "sparsity", 0.0) or 0.0),
               seed=None if seed is None else int(seed), summary=summary,
               loop="sync reference" if summary.get("loop") == "sync-reference"
               else loop_label(config))


def loop_label(config: dict[str, Any]) -> str:
    """'' for edge-rl's default loop; 'lockstep', or 'publish 250/lag 500' when the run's
    broadcast interval or update lag differ from the defaults (the staleness ablations)."""
    if config.get("lockstep"):
        return "lockstep"
    defaults = TrainConfig()
    every = config.get("publish_every", defaults.publish_every)
    lag = config.get("max_update_lag", defaults.max_update_lag)
    if (every, lag) == (defaults.publish_every, defaults.max_update_lag):
        return ""
    return f"publish {every}/lag {lag}"


def group_settings(runs: list[Run]) -> list[Setting]:
    """Groups runs into settings, sorted by env, algo, precision (fp32 first), sparsity."""
    settings: dict[tuple, Setting] = {}
    for run in runs:
        key = (run.env, run.algo, run.precision, run.sparsity, run.loop)
        settings.setdefault(key, Setting(*key, runs=[])).runs.append(run)
    for setting in settings.values():
        setting.runs.sort(key=lambda run: (run.seed is None, run.seed or 0, str(run.path)))
    return sorted(settings.values(), key=lambda s: (
        s.env, s.algo, PRECISION_ORDER.get(s.precision, len(PRECISION_ORDER)), s.precision,
        s.sparsity, s.loop))


def time_to_threshold(evaluations: list[dict[str, Any]],
                      threshold: float) -> tuple[float, int] | None:
    """(wall seconds, env steps) of the first evaluation whose mean reaches the threshold."""
    for evaluation in evaluations:
        if evaluation["mean"] >= threshold:
            return float(evaluation["wall_seconds"]), int(evaluation["env_steps"])
    return None


def default_threshold(best_final_score: float) -> float:
    """95% of the best final score, taken of |score| so that a negative best stays reachable."""
    return best_final_score - THRESHOLD_MARGIN * abs(best_final_score)


def resolve_baseline(baseline: str, settings: list[Setting]) -> tuple[str, str, float, str]:
    """The (algo, precision, sparsity, loop) that `baseline`, a run directory or a label,
    names."""
    if Path(baseline).is_dir():
        run = load_run(Path(baseline))
        key = (run.algo, run.precision, run.sparsity, run.loop)
        if not any(setting.key == key for setting in settings):
            raise UserError(f"baseline {baseline} is a run of none of this report's settings")
        return key
    wanted = " ".join(baseline.lower().split())
    for setting in settings:
        if wanted in (setting.name.lower(), setting.label.lower()):
            return setting.key
    names = ", ".join(sorted({setting.name for setting in settings}))
    raise UserError(f"baseline {baseline!r} matches no run or setting (settings: {names})")


def baseline_of(setting: Setting, env_settings: list[Setting],
                baseline_key: tuple[str, str, float, str] | None) -> Setting | None:
    """What `setting` is compared with in its env: the chosen baseline, else fp32 dense run
    the same way (same loop)."""
    for candidate in env_settings:
        if baseline_key is None:
            if (candidate.algo, candidate.precision, candidate.sparsity, candidate.loop) == (
                    setting.algo, "fp32", 0.0, setting.loop):
                return candidate
        elif candidate.key == baseline_key:
            return candidate
    return None


def mean_or_none(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def reached_threshold(setting: Setting, threshold: float) -> list[tuple[float, int]]:
    """(wall seconds, env steps) to the threshold of each seed that reached it."""
    times = [time_to_threshold(run.evaluations, threshold) for run in setting.runs]
    return [time for time in times if time is not None]


# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom; from a t table.
# Welch's degrees of freedom are rounded down onto this table, which widens the interval.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000,
         120: 1.980}


def final_score_difference(baseline_scores: list[float],
                           scores: list[float]) -> tuple[float, float, float] | None:
    """This setting's mean final score minus the baseline's, with Welch's 95% interval.

    (difference, low, high), or None when either side has fewer than two seeds. Welch's
    interval does not assume the two settings spread alike, and with few seeds it is wide:
    that width is the point, it says how unequal two final scores can be and still look alike.
    """
    if len(baseline_scores) < 2 or len(scores) < 2:
        return None
    a, b = np.asarray(baseline_scores, float), np.asarray(scores, float)
    var_a, var_b = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    difference = float(b.mean() - a.mean())
    if var_a + var_b == 0:
        return difference, difference, difference
    # Welch-Satterthwaite degrees of freedom
    dof = (var_a + var_b) ** 2 / (
        var_a**2 / (len(a) - 1) + var_b**2 / (len(b) - 1))
    t = T_975[max(d for d in T_975 if d <= max(1.0, dof))]
    half = t * float(np.sqrt(var_a + var_b))
    return difference, difference - half, difference + half


def energy_kwh(run: Run) -> float | None:
    return (run.summary.get("energy") or {}).get("kwh")


def co2_grams(run: Run) -> float | None:
    kilograms = (run.summary.get("energy") or {}).get("emissions_kg")
    return None if kilograms is None else kilograms * 1000.0


def mean_over_runs(setting: Setting, value_of) -> tuple[float | None, int]:
    """The mean of value_of(run) over the runs that have a value, and how many have one."""
    values = [value for value in map(value_of, setting.runs) if value is not None]
    return mean_or_none(values), len(values)


def time_shares(setting: Setting, side: str) -> tuple[float, dict[str, float]] | None:
    """One side's ("learner" or "actors") mean seconds per run and each part's % of them."""
    breakdowns = [(run.summary.get("time_breakdown") or {}).get(side) for run in setting.runs]
    breakdowns = [seconds for seconds in breakdowns if seconds]
    if not breakdowns:
        return None
    totals: dict[str, float] = {}
    for seconds in breakdowns:
        for part, value in seconds.items():
            totals[part] = totals.get(part, 0.0) + value
    total = sum(totals.values())
    return total / len(breakdowns), {part: 100.0 * value / total if total > 0 else 0.0
                                     for part, value in totals.items()}
