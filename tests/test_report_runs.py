"""Two real short lockstep runs (fp32 and int8 actors) serve two checks: `edge-rl report`'s
table must agree with what the runs logged, and a rerun from the int8 run's saved config must
reproduce it exactly."""


import pytest
from conftest import edge_rl, train
from test_report import tables

from edge_rl.config import TrainConfig

pytestmark = pytest.mark.slow

THRESHOLD = 25.0  # low: a 2500-step CartPole run of either precision gets there
RUN_FLAGS = ("--lockstep", "--steps", "2500", "--eval-every", "500", "--eval-episodes", "3",
             "--updates-per-step", "1", "--seed", "3")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{precision: (run directory, summary)} of two 2500-step CartPole runs."""
    root = tmp_path_factory.mktemp("runs")
    return {p: (root / p, train(root / p, *RUN_FLAGS, "--actor-precision", p))
            for p in ("fp32", "int8")}


def first_reaching(summary, threshold):
    for evaluation in summary["evaluations"]:
        if evaluation["mean"] >= threshold:
            return evaluation["wall_seconds"], evaluation["env_steps"]
    return None


def test_report_of_fp32_and_int8_runs_matches_their_summaries(runs, tmp_path):
    summaries = {p: summary for p, (_, summary) in runs.items()}
    report = tmp_path / "report"
    result = edge_rl("report", runs["fp32"][0], runs["int8"][0], "-o", report,
                     "--threshold", str(THRESHOLD))
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("report.md", "returns_vs_time_CartPole-v1.png",
                 "returns_vs_steps_CartPole-v1.png"):
        assert (report / name).stat().st_size > 1000, name
    found = tables((report / "report.md").read_text(), "CartPole-v1")

    reached = {p: first_reaching(s, THRESHOLD) for p, s in summaries.items()}
    assert all(reached.values()), reached
    for precision, summary in summaries.items():
        row = found["Results"][f"dqn {precision} dense lockstep"]
        assert row["time to threshold (s)"] == f"{reached[precision][0]:,.1f}"
        assert row["env steps to threshold"] == f"{reached[precision][1]:,}"
        assert row["final score"] == f"{summary['final_return']['mean']:,.1f}"
        assert row["kept policy: best evaluation"] == f"{summary['best_return']['mean']:,.1f}"
        assert row["kept policy: other episodes"] == \
            f"{summary['best_return_heldout']['mean']:,.1f}"
        costs = found["Costs"][f"dqn {precision} dense lockstep"]
        assert costs["policy bytes per broadcast"] == f"{summary['policy_bytes']:,}"
    speed_up = reached["fp32"][0] / reached["int8"][0]
    assert found["Results"]["dqn int8 dense lockstep"]["speed-up vs baseline"] == f"{speed_up:.2f}×"
    energy = {p: s["energy"]["kwh"] for p, s in summaries.items()}
    assert found["Costs"]["dqn int8 dense lockstep"]["energy: baseline / this"] == \
        f"{energy['fp32'] / energy['int8']:.2f}×"
    # int8 weights are a quarter of fp32's, but an int8 file keeps its first and last layers
    # in float32. With the dueling 4-64-64-2 net (--atoms 0) that was about half of the fp32
    # file's bytes on the wire (11,128 against 21,584); the default C51 net's last layer is
    # 64 x 102 (6,528 of its 10,880 weights), so its int8 file is 0.76 of the fp32 one (36,712
    # against 48,008 bytes, 2026-12-05; docs/learning.md, "C51"), and 0.93 with the int8
    # kernels its float layers replaced left in the file, as before that day
    assert summaries["int8"]["policy_bytes"] < 0.85 * summaries["fp32"]["policy_bytes"]


def test_lockstep_runs_are_reproducible_and_a_saved_config_reruns_them(runs, tmp_path):
    first_dir, first = runs["int8"]
    # flags given with --config override the saved ones: energy tracking off this time,
    # which must not change what is learned
    second = train(tmp_path / "again", "--config", first_dir / "config.json", "--no-carbon")
    assert "energy" in first and "energy" not in second
    assert TrainConfig.load(tmp_path / "again" / "config.json").carbon is False
    assert first["final_return"]["mean"] == second["final_return"]["mean"]
    assert first["updates"] == second["updates"]
    policies = [(run / "policy.tflite").read_bytes() for run in (first_dir, tmp_path / "again")]
    assert policies[0] == policies[1]
