"""tools/sync_reference.py and tools/learning_quality.py run as written (real subprocesses)."""

import json
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def test_sync_reference_quick_trains_and_reports_its_evaluations(tmp_path):
    out = tmp_path / "sync"
    subprocess.run([sys.executable, str(TOOLS / "sync_reference.py"), "--quick", "--out",
                    str(out)], check=True, capture_output=True, timeout=300)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["loop"] == "sync-reference" and summary["precision"] == "fp32"
    assert [e["env_steps"] for e in summary["evaluations"]] == [300, 600]
    config = json.loads((out / "config.json").read_text())
    assert (config["algo"], config["nstep"], config["hidden"]) == ("dqn", 3, [256, 256])
    # after the warm-up, the updates the algorithm's updates_per_step allows, no more
    allowed = (config["steps"] - config["warmup_steps"]) * config["updates_per_step"]
    assert summary["updates"] == int(allowed) > 0
    assert all(1 <= e["mean"] <= 500 for e in summary["evaluations"])
    assert summary["stability"]["best"] == max(e["mean"] for e in summary["evaluations"])


def test_learning_quality_plans_resumes_and_reports(tmp_path):
    out = tmp_path / "learning"
    command = [sys.executable, str(TOOLS / "learning_quality.py"), "--suite", "staleness",
               "--seeds", "0", "1", "--out", str(out)]
    plan = subprocess.run([*command, "--dry-run"], check=True, capture_output=True,
                          text=True).stdout
    # default, 250/500, 50/100, lockstep; DQN CartPole and TD3 HalfCheetah; 2 seeds
    assert plan.count(" new") == 16
    # one finished run: it is done, and it is what the report shows
    run_dir = out / "dqn-CartPole-v1-lockstep-s1"
    run_dir.mkdir(parents=True)
    evaluations = [{"env_steps": s, "wall_seconds": s / 1000, "mean": m}
                   for s, m in ((10_000, 200.0), (25_000, 500.0), (50_000, 480.0),
                                (75_000, 400.0), (100_000, 500.0))]
    (run_dir / "summary.json").write_text(json.dumps({
        "evaluations": evaluations, "wall_clock_seconds": 123.0, "stop_reason": "done",
        "stability": {"fraction": 2 / 3}}))
    report = subprocess.run([*command, "--report-only"], check=True, capture_output=True,
                            text=True).stdout
    assert "dqn-CartPole-v1-lockstep-s1" in report and " done" in report
    assert "| lockstep | 1 | 200.0 | 500.0 | 480.0 | 500.0 | 0.67 (0.67) | 123 |" in report


def test_bench_startup_quick_times_a_real_launch():
    result = subprocess.run([sys.executable, str(TOOLS / "bench_startup.py"), "--quick"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    row = next(line for line in result.stdout.splitlines() if line.startswith("| dqn |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "1"  # one launch
    seconds = [float(cell) for cell in cells[2:10]]  # the events, then the process's exit
    assert seconds == sorted(seconds) and seconds[0] > 0
    assert cells[10] == "1"  # one trace of the update loop
