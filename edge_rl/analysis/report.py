"""`edge-rl report`: compare finished runs with plots and markdown tables.

Each run directory holds config.json and summary.json. Runs that share an env, algorithm,
actor precision and sparsity form one *setting*; its seeds are averaged. For each env the
report draws the greedy evaluation return against wall-clock time and against env steps
(one line per setting, with a min-max band over seeds), and writes report.md with, per
setting: the time and env steps to reach a return threshold, the speed-up against a baseline
setting, the final score (and its difference from the baseline's, with a 95% interval),
energy and CO2 (and their ratios against the baseline), the policy bytes per broadcast, the
actors' steps/s and where the learner's and the actors' time went.

Only numpy and the standard library are imported here; matplotlib is imported when a plot is
drawn, and TensorFlow never: a report can be made on any machine that has the run folders.
"""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path

import numpy as np

from edge_rl.analysis.compare import (
    THRESHOLD_MARGIN,
    Setting,
    baseline_of,
    co2_grams,
    default_threshold,
    energy_kwh,
    final_score_difference,
    group_settings,
    load_run,
    mean_or_none,
    mean_over_runs,
    reached_threshold,
    resolve_baseline,
    time_shares,
)
from edge_rl.device.accounting import ACTOR_PARTS, LEARNER_PARTS
from edge_rl.device.errors import UserError
from edge_rl.runs.checkpoint import write_bytes

log = logging.getLogger(__name__)

GRID_POINTS = 200  # x points a multi-seed curve is interpolated onto


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(baseline_value: float | None, value: float | None) -> str:
    """baseline / this: above 1 means this setting is faster or cheaper."""
    if baseline_value is None or value is None or value <= 0:
        return "-"
    return f"{baseline_value / value:.2f}×"


def _of_seeds(text: str, count: int, total: int) -> str:
    return text if count == total or text == "-" else f"{text} ({count} of {total} seeds)"


def _percent(shares: dict[str, float] | None, part: str) -> str:
    if shares is None or part not in shares:
        return "-"
    return "<1%" if 0 < shares[part] < 0.5 else f"{shares[part]:.0f}%"


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
    return [line(header), line(["---"] * len(header)), *map(line, rows), ""]


def env_filename(env: str) -> str:
    """'dm_control/cartpole-balance-v0' -> 'dm_control_cartpole-balance-v0'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", env).strip("_")


def plot_returns(settings: list[Setting], x_key: str, threshold: float, path: Path) -> Path:
    """One env's evaluation returns against x_key ("wall_seconds" or "env_steps").

    A setting with several seeds is drawn as the mean of its seeds' curves, interpolated onto
    a grid that spans only where every seed has evaluations, with a min-max band.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    colors = matplotlib.colormaps["tab10"].colors
    figure = Figure(figsize=(10, 5.5), dpi=120)
    axes = figure.add_subplot()
    for index, setting in enumerate(settings):
        color = colors[index % len(colors)]
        # one (x, return) pair of arrays per seed, in x order
        curves = [np.array(sorted((e[x_key], e["mean"]) for e in run.evaluations), dtype=float).T
                  for run in setting.runs]
        start, end = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
        if len(curves) == 1 or start >= end:
            if len(curves) > 1:
                log.warning("%s: the seeds' evaluations do not overlap; drawing each seed",
                            setting.label)
            for number, (x, y) in enumerate(curves):
                axes.plot(x, y, color=color, linewidth=1.5, label=None if number else setting.label,
                          marker="o" if len(x) <= 30 else None, markersize=3)
            continue
        # at least as many points as a seed has evaluations, so no detail is smoothed away
        grid = np.linspace(start, end, max(GRID_POINTS, *(len(x) for x, _ in curves)))
        returns = np.stack([np.interp(grid, x, y) for x, y in curves])
        axes.fill_between(grid, returns.min(axis=0), returns.max(axis=0), color=color,
                          alpha=0.2, linewidth=0)
        axes.plot(grid, returns.mean(axis=0), color=color, linewidth=2, label=setting.label)
    axes.axhline(threshold, color="0.4", linestyle="--", linewidth=1,
                 label=f"threshold {threshold:,.2f}")

    if x_key == "wall_seconds":
        axes.set_xlabel("wall-clock time (s)")
        axes.set_title(f"{settings[0].env}: greedy evaluation return vs wall-clock time")
    else:
        axes.set_xlabel("env steps (all actors)")
        axes.xaxis.set_major_formatter(EngFormatter())
        axes.set_title(f"{settings[0].env}: greedy evaluation return vs env steps")
    axes.set_ylabel("evaluation return (mean over episodes)")
    axes.set_xlim(left=0)
    axes.grid(True, alpha=0.3)
    several_seeds = any(len(setting.runs) > 1 for setting in settings)
    # outside the axes, on the right: a legend never covers a curve
    axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0,
                fontsize="small", title_fontsize="small",
                title="line: mean over seeds\nband: min–max over seeds" if several_seeds
                else None)
    png = io.BytesIO()
    figure.savefig(png, format="png", bbox_inches="tight")
    write_bytes(path, png.getvalue())  # atomically: a reader never sees half a file
    return path


def threshold_for_env(settings: list[Setting], threshold: float | None) -> tuple[float, str]:
    """The env's threshold and how it was chosen."""
    if threshold is not None:
        return threshold, f"**{threshold:,.2f}**, given with --threshold"
    best = max(settings, key=lambda setting: np.mean(setting.final_scores()))
    best_score = float(np.mean(best.final_scores()))
    value = default_threshold(best_score)
    return value, (f"**{value:,.2f}**: the best final score ({best_score:,.2f}, {best.name}) "
                   f"less {THRESHOLD_MARGIN:.0%} of its magnitude")


def results_table(settings: list[Setting], threshold: float, baselines: dict) -> list[str]:
    rows = []
    for setting in settings:
        seeds = len(setting.runs)
        reached = reached_threshold(setting, threshold)
        mean_seconds = mean_or_none([seconds for seconds, _ in reached])
        seconds = steps = "not reached"
        if reached:
            seconds = _of_seeds(_number(mean_seconds), len(reached), seeds)
            mean_steps = mean_or_none([s for _, s in reached])
            steps = _of_seeds(_number(mean_steps, 0), len(reached), seeds)
        baseline = baselines[setting.name]
        speed_up = "-"
        if baseline is not None and baseline is not setting:
            baseline_seconds = mean_or_none([t for t, _ in reached_threshold(baseline, threshold)])
            speed_up = _ratio(baseline_seconds, mean_seconds)
        scores = setting.final_scores()
        final = _number(float(np.mean(scores)))
        if seeds > 1:
            final += f" ± {_number(float(np.std(scores, ddof=1)))}"
        against = "-"
        if baseline is not None and baseline is not setting:
            against = _difference(baseline.final_scores(), scores)
        seed_list = ", ".join(run.seed_text for run in setting.runs)
        # the kept policy's best evaluation and its return on other episodes, means over seeds
        kept = [_of_seeds(_number(mean_or_none(values)), len(values), seeds)
                for values in setting.kept_policy_returns()]
        rows.append([setting.name, f"{seeds} ({seed_list})", seconds, steps, speed_up, final,
                     against, _stability(setting.stabilities()), *kept])
    return markdown_table(["setting", "seeds", "time to threshold (s)", "env steps to threshold",
                           "speed-up vs baseline", "final score",
                           "final score vs baseline (95% CI)", "late-run stability",
                           "kept policy: best evaluation", "kept policy: other episodes"], rows)


def _stability(fractions: list[float]) -> str:
    """'0.92 (lowest 0.78)': the mean over seeds of the share of evaluations that stayed
    within 5% of the best after first reaching it, and the worst seed's."""
    if not fractions:
        return "-"
    text = f"{np.mean(fractions):.2f}"
    return text + (f" (lowest {min(fractions):.2f})" if len(fractions) > 1 else "")


def _difference(baseline_scores: list[float], scores: list[float]) -> str:
    """'-8.3% (-46.1% to +29.4%)': the difference of mean final scores and Welch's 95%
    interval, in % of the baseline's |mean| (absolute when that mean is 0)."""
    found = final_score_difference(baseline_scores, scores)
    if found is None:
        return "- (needs 2 seeds each)"
    scale = abs(float(np.mean(baseline_scores)))
    if scale == 0:
        return "{:+,.1f} ({:+,.1f} to {:+,.1f})".format(*found)
    return "{:+.1%} ({:+.1%} to {:+.1%})".format(*(value / scale for value in found))


def costs_table(settings: list[Setting], baselines: dict) -> list[str]:
    # one energy unit for the whole table: Wh unless some setting used 0.1 kWh or more
    most_kwh = max(mean_over_runs(setting, energy_kwh)[0] or 0.0 for setting in settings)
    unit, per_kwh = ("kWh", 1.0) if most_kwh >= 0.1 else ("Wh", 1000.0)
    rows = []
    for setting in settings:
        seeds = len(setting.runs)
        kwh, with_energy = mean_over_runs(setting, energy_kwh)
        grams, with_co2 = mean_over_runs(setting, co2_grams)
        baseline = baselines[setting.name]
        energy_ratio = co2_ratio = "-"
        if baseline is not None and baseline is not setting:
            energy_ratio = _ratio(mean_over_runs(baseline, energy_kwh)[0], kwh)
            co2_ratio = _ratio(mean_over_runs(baseline, co2_grams)[0], grams)
        methods = {(run.summary.get("energy") or {}).get("method") for run in setting.runs}
        policy_bytes, _ = mean_over_runs(setting, lambda run: run.summary.get("policy_bytes"))
        steps_per_second, _ = mean_over_runs(
            setting, lambda run: run.summary.get("actor_steps_per_second"))
        energy = _number(None if kwh is None else kwh * per_kwh, 3)
        rows.append([setting.name, _of_seeds(energy, with_energy, seeds), energy_ratio,
                     _of_seeds(_number(grams, 3), with_co2, seeds), co2_ratio,
                     "; ".join(sorted(methods - {None})) or "-", _number(policy_bytes, 0),
                     _number(steps_per_second, 1)])
    return markdown_table(["setting", f"energy ({unit})", "energy: baseline / this", "CO2 (g)",
                           "CO2: baseline / this", "energy method", "policy bytes per broadcast",
                           "actor steps/s"], rows)


def time_table(settings: list[Setting]) -> list[str]:
    rows = []
    for setting in settings:
        learner = time_shares(setting, "learner") or (None, None)
        actors = time_shares(setting, "actors") or (None, None)
        rows.append([setting.name, _number(learner[0]),
                     *(_percent(learner[1], part) for part in LEARNER_PARTS),
                     _number(actors[0]), *(_percent(actors[1], part) for part in ACTOR_PARTS)])
    return markdown_table(["setting", "learner (s)",
                           *(part.replace("_", " ") for part in LEARNER_PARTS),
                           "actors (actor-s)", *ACTOR_PARTS], rows)


def env_section(settings: list[Setting], threshold: float, threshold_note: str,
                baseline_key: tuple[str, str, float, str] | None, images: list[Path]) -> list[str]:
    """One env's part of report.md: threshold, baseline, plots and three tables."""
    baselines = {setting.name: baseline_of(setting, settings, baseline_key)
                 for setting in settings}
    used = sorted({baseline.name for baseline in baselines.values() if baseline is not None})
    if used:
        baseline_note = (f"Baseline: {', '.join(used)}. Speed-up is the baseline's time to "
                         "threshold over this setting's (each the mean over the seeds that "
                         "reached it); cost ratios are baseline / this. Above 1 means faster "
                         "or cheaper. The final score's difference from the baseline comes with "
                         "Welch's 95% confidence interval over the seeds: an interval that "
                         "holds 0 finds no difference, and its width bounds the one there "
                         "could be.")
    else:
        reason = ("no fp32 dense run of the same algo" if baseline_key is None
                  else "the chosen baseline has no runs in it")
        baseline_note = f"No baseline in this env ({reason}): speed-up and ratios are '-'."
    lines = [f"## {settings[0].env}", "", f"Threshold: {threshold_note}.", "", baseline_note, ""]
    lines += [f"![{image.stem}]({image.name})" for image in images] + [""]
    lines += ["### Results", ""] + results_table(settings, threshold, baselines)
    lines += ["### Costs", ""] + costs_table(settings, baselines)
    lines += ["### Where the time went", "",
              "Each part's share of its side's total: the learner's seconds, and the actors' "
              "seconds summed over all actors (actor-seconds). A learner that mostly waits for "
              "actors is held back by them; actors that mostly wait in transport are held back "
              "by the learner.", ""]
    return lines + time_table(settings)


def build_report(run_dirs: list[Path], out_dir: Path, threshold: float | None = None,
                 baseline: str | None = None) -> list[Path]:
    """Writes PNG plots and report.md into out_dir; returns the paths written."""
    if not run_dirs:
        raise UserError("edge-rl report needs at least one run directory")
    if threshold is not None and not np.isfinite(threshold):
        raise UserError(f"--threshold must be a finite number, not {threshold}")
    runs, seen = [], set()
    for run_dir in map(Path, run_dirs):
        if run_dir.resolve() not in seen:  # the same run named twice (a, ./a) counts once
            seen.add(run_dir.resolve())
            runs.append(load_run(run_dir))
    settings = group_settings(runs)
    baseline_key = None if baseline is None else resolve_baseline(baseline, settings)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = ["# edge-rl report", "",
             f"{len(runs)} runs, {len(settings)} settings. A setting is (env, algo, actor "
             "precision, sparsity); its seeds are averaged. Time to threshold is the first "
             "greedy evaluation whose mean return reaches the env's threshold: by default 95% "
             "of the best setting's final score, computed as best − 5% × |best| so that it "
             "stays reachable when returns are negative. Late-run stability: of a seed's "
             "evaluations after the first within 5% of its best, the share that stayed within "
             "5% of it (1.00: once learned, it stayed learned). Kept policy: the exported policy, "
             "the one with the best greedy evaluation; its best evaluation, and its return on as "
             "many episodes from other start states (best_return_heldout in summary.json; '-' "
             "for runs that were interrupted or predate it). The best of many evaluations of "
             "the same episodes flatters the policy it picks; the other episodes do not.", "",
             "## Runs", ""]
    lines += markdown_table(["run", "setting", "seed"], [
        [str(run.path), setting.name, run.seed_text] for setting in settings
        for run in setting.runs])
    written: list[Path] = []
    for env in dict.fromkeys(setting.env for setting in settings):
        env_settings = [setting for setting in settings if setting.env == env]
        env_threshold, note = threshold_for_env(env_settings, threshold)
        if not any(reached_threshold(setting, env_threshold) for setting in env_settings):
            log.warning("%s: no setting reaches the threshold %.4g", env, env_threshold)
        images = [plot_returns(env_settings, x_key, env_threshold,
                               out_dir / f"returns_vs_{name}_{env_filename(env)}.png")
                  for x_key, name in (("wall_seconds", "time"), ("env_steps", "steps"))]
        written += images
        lines += env_section(env_settings, env_threshold, note, baseline_key, images)

    report = out_dir / "report.md"
    write_bytes(report, ("\n".join(lines) + "\n").encode())
    written.append(report)
    log.info("wrote %s and %d plots", report, len(written) - 1)
    return written
