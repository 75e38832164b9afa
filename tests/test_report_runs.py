"""`edge-rl report` on real short runs: its table must agree with what the runs logged."""

import json

import pytest
from conftest import edge_rl
from test_report import tables

pytestmark = pytest.mark.slow

THRESHOLD = 25.0  # low: a 2500-step CartPole run of either precision gets there


def first_reaching(summary, threshold):
    for evaluation in summary["evaluations"]:
        if evaluation["mean"] >= threshold:
            return evaluation["wall_seconds"], evaluation["env_steps"]
    return None


def test_report_of_fp32_and_int8_runs_matches_their_summaries(tmp_path):
    summaries = {}
    for precision in ("fp32", "int8"):
        out = tmp_path / precision
        result = edge_rl("train", "--out", out, "--lockstep", "--steps", "2500",
                         "--eval-every", "500", "--eval-episodes", "3", "--seed", "3",
                         "--actor-precision", precision)
        assert result.returncode == 0, result.stderr[-3000:]
        summaries[precision] = json.loads((out / "summary.json").read_text())

    report = tmp_path / "report"
    result = edge_rl("report", tmp_path / "fp32", tmp_path / "int8", "-o", report,
                     "--threshold", str(THRESHOLD))
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("report.md", "returns_vs_time_CartPole-v1.png",
                 "returns_vs_steps_CartPole-v1.png"):
        assert (report / name).stat().st_size > 1000, name
    found = tables((report / "report.md").read_text(), "CartPole-v1")

    reached = {p: first_reaching(s, THRESHOLD) for p, s in summaries.items()}
    assert all(reached.values()), reached
    for precision, summary in summaries.items():
        row = found["Results"][f"dqn {precision} dense"]
        assert row["time to threshold (s)"] == f"{reached[precision][0]:,.1f}"
        assert row["env steps to threshold"] == f"{reached[precision][1]:,}"
        assert row["final score"] == f"{summary['final_return']['mean']:,.1f}"
        costs = found["Costs"][f"dqn {precision} dense"]
        assert costs["policy bytes per broadcast"] == f"{summary['policy_bytes']:,}"
    speed_up = reached["fp32"][0] / reached["int8"][0]
    assert found["Results"]["dqn int8 dense"]["speed-up vs baseline"] == f"{speed_up:.2f}×"
    energy = {p: s["energy"]["kwh"] for p, s in summaries.items()}
    assert found["Costs"]["dqn int8 dense"]["energy: baseline / this"] == \
        f"{energy['fp32'] / energy['int8']:.2f}×"
    # an int8 policy is about a quarter of an fp32 one on the wire
    assert summaries["int8"]["policy_bytes"] < summaries["fp32"]["policy_bytes"] / 2
