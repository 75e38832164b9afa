"""edge_rl.analysis.report on hand-written run directories: no TensorFlow, no training."""

import json
import subprocess
import sys

import numpy as np
import pytest

from edge_rl.analysis.compare import default_threshold, final_score_difference, time_to_threshold
from edge_rl.analysis.report import build_report, env_filename
from edge_rl.device.errors import UserError

INTENSITY = 439.8  # g CO2 per kWh, as codecarbon's world average


def evaluations(seconds_per_eval, means, steps_per_eval=1000):
    return [{"env_steps": steps_per_eval * k, "wall_seconds": seconds_per_eval * k, "mean": m}
            for k, m in enumerate(means, start=1)]


def breakdown(updates, waiting, inference, env):
    return {"learner": {"updates": updates, "publishing": 10.0, "evaluation": 5.0,
                        "checkpoints": 1.0, "ingest": 4.0, "waiting_for_actors": waiting},
            "actors": {"inference": inference, "env": env, "transport": 20.0}}


# name: (env, algo, precision, sparsity, seed, evaluations, kWh or None, policy bytes)
PENDULUM = "Pendulum-v1"
RUNS = {
    "fp32-0": (PENDULUM, "td3", "fp32", 0.0, 0, evaluations(
        10, [-1400, -1200, -900, -600, -400, -250, -150, -140]), 0.0020, 40000),
    "fp32-1": (PENDULUM, "td3", "fp32", 0.0, 1, evaluations(
        11, [-1450, -1300, -1000, -700, -450, -300, -141, -138]), 0.0022, 40000),
    "int8-0": (PENDULUM, "td3", "int8", 0.0, 0, evaluations(
        5, [-1400, -1100, -800, -500, -300, -200, -140, -136]), 0.0010, 12000),
    "int8-1": (PENDULUM, "td3", "int8", 0.0, 1, evaluations(
        6, [-1380, -1000, -700, -400, -250, -141.5, -135, -134]), 0.0012, 12000),
    # one seed reaches the threshold, the other does not (and is an older, shorter summary)
    "fp16-0": (PENDULUM, "td3", "fp16", 0.0, 0, evaluations(
        9, [-1500, -1200, -900, -600, -400, -250, -170, -140]), 0.0015, 20000),
    "fp16-1": (PENDULUM, "td3", "fp16", 0.0, 1, evaluations(
        9, [-1500, -1200, -900, -600, -400, -250, -200, -180]), 0.0015, 20000),
    # a single seed, run with --no-carbon, that never reaches the threshold
    "sparse-0": (PENDULUM, "td3", "int8", 0.9, 0, evaluations(
        4, [-1500, -1200, -900, -600, -400, -250, -160, -142]), None, 3000),
    "cartpole-fp32": ("CartPole-v1", "dqn", "fp32", 0.0, 0, evaluations(
        20, [20, 100, 300, 480, 500]), 0.0005, 30000),
    "cartpole-int8": ("CartPole-v1", "dqn", "int8", 0.0, 0, evaluations(
        8, [30, 200, 476, 480, 480]), 0.0003, 9000),
}
OLD_FORMAT = {"fp16-1"}  # no seed, sparsity, energy, actor steps/s or time breakdown
NOT_HELDOUT = {"int8-1"}  # interrupted: no return on other episodes (nor have OLD_FORMAT's)
HELDOUT_DROP = 4.0  # the kept policy's return on other episodes, this much below its best


def write_run(run_dir, name):
    env, algo, precision, sparsity, seed, evals, kwh, policy_bytes = RUNS[name]
    run_dir.mkdir(parents=True)
    config = {"env": env, "algo": algo, "actor_precision": precision, "sparsity": sparsity,
              "seed": seed, "actors": 2, "steps": evals[-1]["env_steps"]}
    summary = {"algo": algo, "env": env, "precision": precision, "steps": evals[-1]["env_steps"],
               "updates": 5000, "wall_clock_seconds": evals[-1]["wall_seconds"] + 1.0,
               "policy_bytes": policy_bytes, "policies_published": 50,
               "final_return": {"mean": evals[-1]["mean"], "std": 5.0, "episodes": 10},
               "best_return": {"mean": max(e["mean"] for e in evals), "std": 5.0},
               "evaluations": evals}
    if name not in OLD_FORMAT | NOT_HELDOUT:
        summary["best_return_heldout"] = {"mean": summary["best_return"]["mean"] - HELDOUT_DROP,
                                          "std": 6.0, "episodes": 10}
    if name not in OLD_FORMAT:
        summary.update(seed=seed, sparsity=sparsity, actor_steps_per_second=250.0,
                       time_breakdown=breakdown(60.0, 20.0, 30.0, 50.0))
        if kwh is not None:
            summary["energy"] = {"joules": kwh * 3.6e6, "kwh": kwh,
                                 "emissions_kg": kwh * INTENSITY / 1000,
                                 "method": "learner machine: cpu-seconds x 10 W/core",
                                 "country": None, "carbon_intensity_g_per_kwh": INTENSITY}
    (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {name: write_run(root / name, name) for name in RUNS}


@pytest.fixture(scope="module")
def report(run_dirs, tmp_path_factory):
    """The default report over every fixture run: (files written, report.md's text)."""
    out = tmp_path_factory.mktemp("report")
    written = build_report(list(run_dirs.values()), out)
    return written, (out / "report.md").read_text()


def tables(markdown, env):
    """The markdown tables of one env's section, by section title: {title: {setting: row}}."""
    section = markdown.split(f"## {env}\n", 1)[1].split("\n## ", 1)[0]
    found = {}
    for part in section.split("### ")[1:]:
        title, _, body = part.partition("\n")
        lines = [line for line in body.splitlines() if line.startswith("|")]
        header = [cell.strip() for cell in lines[0].strip("|").split("|")]
        rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
                for line in lines[2:]]
        found[title] = {row["setting"]: row for row in rows}
    return found


def first_reaching(name, threshold):
    for evaluation in RUNS[name][5]:
        if evaluation["mean"] >= threshold:
            return evaluation["wall_seconds"], evaluation["env_steps"]
    return None


def final_scores(*names):
    return [RUNS[name][5][-1]["mean"] for name in names]


PENDULUM_THRESHOLD = default_threshold(max(np.mean(final_scores("fp32-0", "fp32-1")),
                                           np.mean(final_scores("int8-0", "int8-1"))))


def test_default_threshold_for_negative_returns_stays_reachable(report):
    best = np.mean(final_scores("int8-0", "int8-1"))  # -135, the best setting's final score
    assert default_threshold(best) == pytest.approx(-141.75)
    assert default_threshold(-150.0) == pytest.approx(-157.5)  # below the best, not above
    assert default_threshold(500.0) == pytest.approx(475.0)
    assert "Threshold: **-141.75**" in report[1]
    assert "Threshold: **475.00**" in report[1]  # CartPole: 95% of dqn fp32's 500


def test_time_and_steps_to_threshold_are_the_first_evaluation_reaching_it(report):
    results = tables(report[1], PENDULUM)["Results"]
    for setting, names in (("td3 fp32 dense", ("fp32-0", "fp32-1")),
                           ("td3 int8 dense", ("int8-0", "int8-1"))):
        reached = [first_reaching(name, PENDULUM_THRESHOLD) for name in names]
        seconds, steps = [r[0] for r in reached], [r[1] for r in reached]
        assert results[setting]["time to threshold (s)"] == f"{np.mean(seconds):.1f}"
        assert results[setting]["env steps to threshold"] == f"{np.mean(steps):,.0f}"
    assert results["td3 int8 dense"]["time to threshold (s)"] == "35.5"  # (35 + 36) / 2
    assert results["td3 int8 dense"]["env steps to threshold"] == "6,500"
    assert time_to_threshold(RUNS["int8-1"][5], PENDULUM_THRESHOLD) == (36.0, 6000)


def test_not_reached_and_k_of_n_seeds(report):
    results = tables(report[1], PENDULUM)["Results"]
    assert results["td3 int8 90% sparse"]["time to threshold (s)"] == "not reached"
    assert results["td3 int8 90% sparse"]["env steps to threshold"] == "not reached"
    assert results["td3 int8 90% sparse"]["speed-up vs baseline"] == "-"
    assert results["td3 fp16 dense"]["time to threshold (s)"] == "72.0 (1 of 2 seeds)"
    assert results["td3 fp16 dense"]["env steps to threshold"] == "8,000 (1 of 2 seeds)"


def test_speed_up_is_baseline_time_over_setting_time(report):
    results = tables(report[1], PENDULUM)["Results"]
    baseline = np.mean([first_reaching(n, PENDULUM_THRESHOLD)[0] for n in ("fp32-0", "fp32-1")])
    int8 = np.mean([first_reaching(n, PENDULUM_THRESHOLD)[0] for n in ("int8-0", "int8-1")])
    assert results["td3 int8 dense"]["speed-up vs baseline"] == f"{baseline / int8:.2f}×"
    assert results["td3 int8 dense"]["speed-up vs baseline"] == "2.21×"  # 78.5 / 35.5
    assert results["td3 fp32 dense"]["speed-up vs baseline"] == "-"  # the baseline itself
    cartpole = tables(report[1], "CartPole-v1")["Results"]
    assert cartpole["dqn int8 dense"]["speed-up vs baseline"] == f"{80 / 24:.2f}×"


def test_final_score_is_mean_and_std_over_seeds(report):
    results = tables(report[1], PENDULUM)["Results"]
    scores = final_scores("int8-0", "int8-1")
    expected = f"{np.mean(scores):.1f} ± {np.std(scores, ddof=1):.1f}"
    assert results["td3 int8 dense"]["final score"] == expected == "-135.0 ± 1.4"
    assert results["td3 int8 90% sparse"]["final score"] == "-142.0"  # one seed: no ±
    assert results["td3 int8 dense"]["seeds"] == "2 (0, 1)"


def test_kept_policy_best_evaluation_and_other_episodes_are_means_over_seeds(report):
    results = tables(report[1], PENDULUM)["Results"]
    best = "kept policy: best evaluation"
    other = "kept policy: other episodes"
    # fp32 bests -140 and -138; on other episodes 4 lower each
    assert results["td3 fp32 dense"][best] == "-139.0"
    assert results["td3 fp32 dense"][other] == "-143.0"
    # int8 seed 1 was interrupted: its best counts, its other episodes do not exist
    assert results["td3 int8 dense"][best] == "-135.0"  # (-136 - 134) / 2
    assert results["td3 int8 dense"][other] == "-140.0 (1 of 2 seeds)"  # seed 0: -136 - 4
    assert results["td3 fp16 dense"][other] == "-144.0 (1 of 2 seeds)"  # seed 1: old format
    assert tables(report[1], "CartPole-v1")["Results"]["dqn int8 dense"][other] == "476.0"


def test_final_score_difference_is_welchs_interval():
    # by hand: difference -1; each mean's variance 4/3; Welch's dof (8/3)^2 / (2 (4/3)^2 / 2)
    # = 4, t(0.975, 4) = 2.776; half-width 2.776 * sqrt(8/3) = 4.533
    difference, low, high = final_score_difference([10, 12, 14], [9, 11, 13])
    assert difference == pytest.approx(-1.0)
    assert (low, high) == pytest.approx((-5.533, 3.533), abs=1e-3)
    # unequal spreads: dof = (1/3 + 16/3)^2 / ((1/3)^2/2 + (16/3)^2/2) = 2.24, rounded down
    # to 2 (t = 4.303); half-width 4.303 * sqrt(17/3) = 10.243
    difference, low, high = final_score_difference([9, 10, 11], [0, 4, 8])
    assert (difference, low, high) == pytest.approx((-6.0, -16.243, 4.243), abs=1e-3)
    assert final_score_difference([5, 5], [5, 5]) == (0.0, 0.0, 0.0)
    assert final_score_difference([1.0], [1.0, 2.0]) is None


def test_final_score_against_baseline_in_percent_with_its_interval(report):
    results = tables(report[1], PENDULUM)["Results"]
    column = "final score vs baseline (95% CI)"
    # fp32 finals -140, -138; int8 -136, -134: +4 ± 4.303 * sqrt(2), over |mean| 139
    assert results["td3 int8 dense"][column] == "+2.9% (-1.5% to +7.3%)"
    assert results["td3 fp32 dense"][column] == "-"  # the baseline itself
    assert results["td3 int8 90% sparse"][column] == "- (needs 2 seeds each)"


def test_energy_ratio_is_baseline_over_setting_and_missing_energy_is_a_dash(report):
    costs = tables(report[1], PENDULUM)["Costs"]
    baseline_kwh = np.mean([RUNS[n][6] for n in ("fp32-0", "fp32-1")])
    int8_kwh = np.mean([RUNS[n][6] for n in ("int8-0", "int8-1")])
    assert costs["td3 int8 dense"]["energy (Wh)"] == f"{int8_kwh * 1000:.3f}"
    assert costs["td3 int8 dense"]["energy: baseline / this"] == f"{baseline_kwh / int8_kwh:.2f}×"
    assert costs["td3 int8 dense"]["CO2: baseline / this"] == f"{baseline_kwh / int8_kwh:.2f}×"
    assert costs["td3 int8 dense"]["CO2 (g)"] == f"{int8_kwh * INTENSITY:.3f}"
    assert costs["td3 int8 90% sparse"]["energy (Wh)"] == "-"
    assert costs["td3 int8 90% sparse"]["energy: baseline / this"] == "-"
    assert costs["td3 fp16 dense"]["energy (Wh)"] == "1.500 (1 of 2 seeds)"
    assert costs["td3 int8 dense"]["policy bytes per broadcast"] == "12,000"
    assert costs["td3 fp16 dense"]["actor steps/s"] == "250.0"  # the seed that reports it


def test_time_breakdown_is_each_sides_share(report):
    time = tables(report[1], PENDULUM)["Where the time went"]
    row = time["td3 fp32 dense"]
    assert row["learner (s)"] == "100.0"  # 60 + 10 + 5 + 1 + 4 + 20
    assert (row["updates"], row["waiting for actors"]) == ("60%", "20%")
    assert (row["actors (actor-s)"], row["inference"], row["env"]) == ("100.0", "30%", "50%")
    assert time["td3 fp16 dense"]["learner (s)"] == "100.0"  # over the seed that has it


def test_values_missing_from_older_summaries_come_from_config(report):
    runs = report[1].split("## Runs", 1)[1].split("\n## ", 1)[0]
    assert any("fp16-1" in line and "td3 fp16 dense" in line and line.endswith("| 1 |")
               for line in runs.splitlines())


def test_pngs_are_valid_images_for_each_env(report):
    import matplotlib.image

    written, markdown = report
    names = {path.name for path in written}
    for env in (PENDULUM, "CartPole-v1"):
        for kind in ("time", "steps"):
            name = f"returns_vs_{kind}_{env}.png"
            assert name in names and f"]({name})" in markdown
    for path in written[:-1]:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
        image = matplotlib.image.imread(path)
        assert image.shape[0] > 300 and image.shape[1] > 500
    assert written[-1].name == "report.md"


def test_env_names_are_sanitized_for_filenames():
    assert env_filename("dm_control/cartpole-balance-v0") == "dm_control_cartpole-balance-v0"
    assert env_filename("my_pkg.envs:Arm-v0") == "my_pkg.envs_Arm-v0"


def test_threshold_option_is_used_for_every_env(run_dirs, tmp_path):
    build_report([run_dirs["cartpole-int8"], run_dirs["int8-0"]], tmp_path, threshold=-300.0)
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.count("Threshold: **-300.00**, given with --threshold") == 2
    results = tables(markdown, "CartPole-v1")["Results"]
    assert results["dqn int8 dense"]["time to threshold (s)"] == "8.0"  # the first evaluation
    assert results["dqn int8 dense"]["speed-up vs baseline"] == "-"  # no fp32 dense here
    assert markdown.count("No baseline in this env (no fp32 dense run of the same algo)") == 2


def test_baseline_can_be_a_run_dir_or_a_label(run_dirs, tmp_path):
    dirs = [run_dirs[name] for name in ("fp32-0", "int8-0", "fp16-0")]
    for baseline in (str(run_dirs["int8-0"]), "td3 int8 dense", "td3 int8 dense, seed 0"):
        build_report(dirs, tmp_path, baseline=baseline)
        results = tables((tmp_path / "report.md").read_text(), PENDULUM)["Results"]
        assert results["td3 int8 dense"]["speed-up vs baseline"] == "-"
        fp32 = first_reaching("fp32-0", default_threshold(-136))[0]
        int8 = first_reaching("int8-0", default_threshold(-136))[0]
        assert results["td3 fp32 dense"]["speed-up vs baseline"] == f"{int8 / fp32:.2f}×"


def test_a_dir_without_summary_is_a_user_error(run_dirs, tmp_path):
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "config.json").write_text("{}")
    with pytest.raises(UserError, match="not a finished run"):
        build_report([run_dirs["fp32-0"], tmp_path / "unfinished"], tmp_path / "out")


def test_an_unknown_baseline_is_a_user_error(run_dirs, tmp_path):
    with pytest.raises(UserError, match="matches no run or setting"):
        build_report([run_dirs["fp32-0"]], tmp_path, baseline="sac int8 dense")


def test_no_runs_or_no_evaluations_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="at least one run"):
        build_report([], tmp_path)
    run_dir = write_run(tmp_path / "empty", "fp32-0")
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "evaluations": []}))
    with pytest.raises(UserError, match="no evaluations"):
        build_report([run_dir], tmp_path / "out")


def test_importing_the_report_imports_neither_matplotlib_nor_tensorflow():
    code = ("import sys, edge_rl.analysis.report; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('matplotlib', 'tensorflow', 'tf_agents')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_loop_variants_are_settings_of_their_own_with_their_stability(tmp_path):
    """Lockstep and staleness ablations (other publish interval / update lag) are reported
    apart from the default loop, each with its late-run stability."""
    swings = [100, 500, 91, 500, 230, 500, 500]  # 3 of the 5 after the first 500 at 500
    steady = [100, 300, 500, 500, 499, 500, 500]
    variants = {"default": ({}, swings), "lockstep": ({"lockstep": True}, steady),
                "stale": ({"publish_every": 250, "max_update_lag": 500}, steady)}
    dirs = []
    for name, (config_changes, means) in variants.items():
        run_dir = write_run(tmp_path / name, "cartpole-int8")
        config = json.loads((run_dir / "config.json").read_text())
        (run_dir / "config.json").write_text(json.dumps({**config, **config_changes}))
        summary = json.loads((run_dir / "summary.json").read_text())
        summary["evaluations"] = evaluations(8, means)
        (run_dir / "summary.json").write_text(json.dumps(summary))
        dirs.append(run_dir)
    build_report(dirs, tmp_path / "report")
    results = tables((tmp_path / "report" / "report.md").read_text(), "CartPole-v1")["Results"]
    assert results["dqn int8 dense"]["late-run stability"] == "0.60"
    assert results["dqn int8 dense lockstep"]["late-run stability"] == "1.00"
    assert results["dqn int8 dense publish 250/lag 500"]["late-run stability"] == "1.00"
