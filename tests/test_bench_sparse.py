"""tools/bench_sparse.py, RLx2's campaign driver: its plan, resume states and tables, run as a
real subprocess (the training runs themselves are the tool's work, not the test's)."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "bench_sparse.py"


def fake_run(run_dir: Path, scores: list[float], parameters: int, policy_bytes: int = 0,
             finished: bool = True) -> None:
    """A finished run as the driver reads it: summary.json with evaluations and counts."""
    run_dir.mkdir(parents=True)
    evaluations = [{"env_steps": 5_000 * (i + 1), "wall_seconds": i, "mean": m}
                   for i, m in enumerate(scores)]
    (run_dir / "summary.json").write_text(json.dumps({
        "evaluations": evaluations, "wall_clock_seconds": 900.0, "updates": 1000,
        "stop_reason": "reached --steps" if finished else "interrupted",
        "networks": {"groups": {"actor": {"nonzero_parameters": parameters // 4},
                                "critic": {"nonzero_parameters": parameters - parameters // 4}},
                     "train_flops": 2.0 * parameters * 1000, "inference_flops": parameters}}))
    for name in ("policy-int8.tflite", "policy-fp32.tflite"):
        (run_dir / name).write_bytes(b"\0" * (policy_bytes or 1024))


def test_campaign_plan_resume_states_and_ultimate_compression(tmp_path):
    out = tmp_path / "bench"
    command = [sys.executable, str(TOOL), "--out", str(out), "--seeds", "0", "1"]
    plan = subprocess.run([*command, "--dry-run"], check=True, capture_output=True,
                          text=True).stdout
    # per seed: 3 envs x (dense, rigl, rlx2), 2 ablations on 2 envs and the no-delay one on
    # Walker2d, the Hopper sweep's 2 other sparsities x (rigl, rlx2, rlx2-no-delay), RLx2 with
    # the paper's 10% delay on Hopper, with a fixed 50k delay on Walker2d and Hopper:
    # 9 + 5 + 6 + 1 + 2 = 23
    assert plan.count(" new ") == 46 and "46 runs, 46 to do" in plan
    assert "td3-Hopper-v5-300k/rlx2-no-delay-a90c85-s1" in plan  # the default's sweep
    assert "td3-Walker2d-v5-300k/rlx2-no-delay-a97c95-s1" in plan
    assert "td3-Walker2d-v5-300k/rlx2-delay50k-a97c95-s1" in plan
    assert "td3-Hopper-v5-300k/rlx2-no-buffer-a98c95-s1" in plan
    assert "td3-Hopper-v5-300k/rlx2-a98c95-s1" in plan  # the paper's Hopper sparsity
    # the 1M rows (below)
    assert not any(row in plan for row in ("no-delay-no-buffer", "replay100k", "nstep3"))
    long = subprocess.run([*command, "--steps", "1000000", "--dry-run"], check=True,
                          capture_output=True, text=True).stdout
    assert "52 runs, 52 to do" in long  # the same 46, and 3 more per seed on Hopper
    assert "td3-Hopper-v5-1000k/rlx2-no-delay-no-buffer-a98c95-s1" in long
    assert "td3-Hopper-v5-1000k/dense-replay100k-s1" in long
    assert "td3-Hopper-v5-1000k/dense-nstep3-s1" in long

    hopper = out / "td3-Hopper-v5-300k"
    dense = 1_000_000
    for seed in (0, 1):
        fake_run(hopper / f"dense-s{seed}", [3000.0] * 10, dense)
        # RigL keeps dense's score to 0.95/0.9, not at 0.98/0.95; RLx2 to the sparsest
        fake_run(hopper / f"rigl-a90c85-s{seed}", [3000.0] * 10, dense // 8)
        fake_run(hopper / f"rigl-a95c90-s{seed}", [2950.0] * 10, dense // 12)
        fake_run(hopper / f"rigl-a98c95-s{seed}", [2500.0] * 10, dense // 25)
        fake_run(hopper / f"rlx2-a90c85-s{seed}", [3010.0] * 10, dense // 8)
        fake_run(hopper / f"rlx2-a95c90-s{seed}", [2990.0] * 10, dense // 12)
        fake_run(hopper / f"rlx2-a98c95-s{seed}", [2960.0] * 10, dense // 25)
    # the export check refused one seed's int8 file: the row shows the other seed's file
    (hopper / "rigl-a98c95-s0" / "policy-int8.tflite").unlink()
    # ... and dense seed 0's, so neither of its files was written: seed 1's fp32 is the yardstick
    for name in ("policy-int8.tflite", "policy-fp32.tflite"):
        (hopper / "dense-s0" / name).unlink()
    # an interrupted run with a checkpoint resumes; one exported in part is exported again
    cheetah = out / "td3-HalfCheetah-v5-300k"
    fake_run(cheetah / "rigl-a90c85-s0", [100.0] * 10, dense // 7, finished=False)
    (cheetah / "rigl-a90c85-s0" / "checkpoints" / "ckpt-000000150000").mkdir(parents=True)
    (cheetah / "rigl-a90c85-s0" / "checkpoints" / "latest").write_text("ckpt-000000150000")
    fake_run(cheetah / "dense-s0", [5000.0] * 10, dense)
    (cheetah / "dense-s0" / "policy-fp32.tflite").unlink()

    # Walker2d: dense rising by 100 an evaluation, RLx2 by 50, RigL flat above both
    walker = out / "td3-Walker2d-v5-300k"
    fake_run(walker / "dense-s0", [100.0 * i for i in range(20)], dense)
    fake_run(walker / "rlx2-a97c95-s0", [50.0 * i for i in range(20)], dense // 20)
    fake_run(walker / "rigl-a97c95-s0", [2000.0] * 20, dense // 20)

    result = subprocess.run([*command, "--table-only"], check=True, capture_output=True,
                            text=True).stdout
    statuses = dict(line.split()[:2] for line in result.splitlines() if "-300k/" in line)
    assert statuses["td3-HalfCheetah-v5-300k/rigl-a90c85-s0"] == "resume"
    assert statuses["td3-HalfCheetah-v5-300k/dense-s0"] == "export"
    assert statuses["td3-Hopper-v5-300k/rlx2-a98c95-s0"] == "done"
    assert ("Ultimate compression ratio, rigl: 12.0x (rigl-a95c90, 2 seeds) (by the second "
            "half's mean: 12.0x (rigl-a95c90, 2 seeds)).") in result
    assert "Ultimate compression ratio, rlx2: 25.0x (rlx2-a98c95, 2 seeds) (by" in result
    # Hopper's row at the paper's sparsity, with the paper's figure beside it
    row = next(line for line in result.splitlines() if line.startswith("| rlx2-a98c95 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "2" and cells[2] == "2960 ± 0" and cells[3].startswith("98.7 [")
    assert cells[4] == "97.0" and cells[5] == "0.040"
    assert cells[9] == "1.0 KiB (1.0x < fp32)"
    rigl = next(line for line in result.splitlines() if line.startswith("| rigl-a98c95 |"))
    assert "1.0 KiB (1 of 2 refused)" in rigl
    assert "none was written for that seed" in result
    # the pace table: RLx2's score (mean of 50 * 10..19 = 725) is dense's 10-evaluation mean
    # at its 13th evaluation (100 * (12 - 4.5) = 750 >= 725), and both still climb from 225 and
    # 450 ten evaluations before
    walker_table = result[result.index("Walker2d-v5, 300"):]
    assert "| rlx2-a97c95 | 65,000 | +222% | 50.0 [50.0, 50.0] |" in walker_table
    assert "| rigl-a97c95 | never (above dense) | +0% |" in walker_table
    assert "| dense | - | +222% |" in walker_table
    assert (out / "table.md").read_text().strip() == result[result.index("# RLx2"):].strip()

    # Each finished run left a small record. On a machine without the run folders (a new one,
    # the checkpoints gone), the records keep those runs done and the tables the same.
    records = out / "results"
    record = json.loads((records / "td3-Hopper-v5-300k" / "rigl-a98c95-s0.json").read_text())
    assert record["files"]["int8"] == 0 and record["files"]["fp32"] == 1024  # refused int8
    assert record["command"][:2] == ["edge-rl", "train"] and "--out" not in record["command"]
    assert not (records / "td3-HalfCheetah-v5-300k" / "rigl-a90c85-s0.json").exists()
    kept = tmp_path / "kept"
    records.rename(kept)
    shutil.rmtree(out)
    again = subprocess.run([*command, "--results", str(kept), "--table-only"], check=True,
                           capture_output=True, text=True).stdout
    statuses = dict(line.split()[:2] for line in again.splitlines() if "-300k/" in line)
    assert statuses["td3-Hopper-v5-300k/rlx2-a98c95-s0"] == "done"
    assert statuses["td3-HalfCheetah-v5-300k/rigl-a90c85-s0"] == "new"  # it had not finished
    assert again[again.index("# RLx2"):] == result[result.index("# RLx2"):]


def load_tool(name: str, monkeypatch):
    """tools/NAME.py as a module, with tools/ on the path (the driver imports its siblings)."""
    monkeypatch.syspath_prepend(str(TOOL.parent))
    spec = importlib.util.spec_from_file_location(name, TOOL.with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_rows_bootstrap_interval_is_its_own(monkeypatch):
    """The docs quote these intervals: one row's must not move when rows are added before it."""
    tables = load_tool("bench_sparse_tables", monkeypatch)
    values, dense = [768.0, 1275.0, 1792.0, 905.0, 1433.0], [1100.0, 1700.0, 2525.0, 1290.0]
    first = tables.bootstrap_ratio(values, dense)
    tables.bootstrap_ratio([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])  # another table's row
    assert tables.bootstrap_ratio(values, dense) == first
    low, high = first
    assert low < 100 * np.mean(values) / np.mean(dense) < high and high - low > 10


def test_seeds_to_settle_the_97_percent_question(monkeypatch):
    """How many seeds each would take for the interval to stop holding 97% of dense: what
    budget would settle a shortfall. By the normal approximation, with the seeds' sd (ddof 1),
    a method at 80% whose seeds spread by 600 against dense's 500 (mean 2,500) needs about
    12; with twice its spread, (1200^2 + 500^2) / (600^2 + 500^2) = 2.8x as many, past the
    driver's default of 30 but found with a larger `most` (--most-seeds)."""
    tables = load_tool("bench_sparse_tables", monkeypatch)
    dense = [2000.0, 2500.0, 3000.0]
    assert tables.seeds_to_settle([1000.0] * 3, dense) == 3  # its interval already excludes 97
    near = tables.seeds_to_settle([1400.0, 2000.0, 2600.0], dense)
    assert 9 <= near <= 16
    assert tables.seeds_to_settle([800.0, 2000.0, 3200.0], dense) is None
    wide = tables.seeds_to_settle([800.0, 2000.0, 3200.0], dense, most=200)
    assert 2.2 * near <= wide <= 3.5 * near
    assert tables.seeds_to_settle([1940.0, 2425.0, 2910.0], dense) is None  # at 97% exactly
    above = tables.seeds_to_settle([2400.0, 2750.0, 3100.0], dense)  # 110%: its low end > 97
    assert 8 <= above <= 20
    assert tables.bootstrap_ratio([2400.0, 2750.0, 3100.0], dense)[0] < 97
    driver = load_tool("bench_sparse", monkeypatch)
    assert driver.parse_args(["--most-seeds", "400"]).most_seeds == 400
    with pytest.raises(SystemExit) as refused:  # argparse's exit status for bad input
        driver.parse_args(["--most-seeds", "0"])
    assert refused.value.code == 2


def test_each_rlx2_row_names_the_delay_its_records_ran_with(monkeypatch):
    """The records outlive edge-rl's defaults: an RLx2 row's 3-step switch is in its flags
    (a tenth of the run for delay10, 50k for delay50k, half the run for rlx2 and no-buffer),
    not left to `--rlx2`'s default, which changed after they were made."""
    driver = load_tool("bench_sparse", monkeypatch)

    def delay(name: str, steps: int) -> str | None:
        runs = {r.run_dir.name: r for r in driver.plan_runs("campaign", steps, [0], Path("out"))}
        flags = runs[name].setting.flags()
        return flags[flags.index("--nstep-delay") + 1] if "--nstep-delay" in flags else None

    assert delay("rlx2-delay10-a98c95-s0", 300_000) == "30000"
    assert delay("rlx2-delay50k-a98c95-s0", 300_000) == "50000"
    assert delay("rlx2-a98c95-s0", 300_000) == "150000"
    assert delay("rlx2-no-buffer-a98c95-s0", 300_000) == "150000"
    assert delay("rlx2-a98c95-s0", 1_000_000) == "300000"
    assert delay("rlx2-no-delay-a98c95-s0", 300_000) is None  # TD3's --rlx2 default below 3M
    assert delay("rlx2-no-delay-no-buffer-a98c95-s0", 1_000_000) is None
    runs = {r.run_dir.name: r for r in driver.plan_runs("campaign", 1_000_000, [0], Path("o"))}
    assert "--dynamic-buffer" not in runs["rlx2-no-delay-no-buffer-a98c95-s0"].setting.flags()
    assert runs["dense-replay100k-s0"].setting.flags() == ["--replay-capacity", "100000"]
    assert runs["dense-nstep3-s0"].setting.flags() == ["--nstep", "3"]
    # SAC's plan: the old default's row (half the run) and today's (no delay) side by side
    sac = {r.run_dir.name: r for r in driver.plan_runs("sac", 300_000, [0], Path("o"))}
    assert sorted(sac) == ["dense-s0", "rigl-a90c80-s0", "rlx2-a90c80-s0",
                           "rlx2-no-delay-a90c80-s0"]
    assert "150000" in sac["rlx2-a90c80-s0"].setting.flags()
    today = sac["rlx2-no-delay-a90c80-s0"].setting.flags()
    assert "--nstep-delay" not in today and "--dynamic-buffer" in today


def test_second_half_mean_beside_the_score_in_the_pace_and_compression_tables(monkeypatch):
    """A run that climbs and falls over before its end (Hopper): its last 10 evaluations miss
    dense's mean by more than 3%, its second half's mean does not."""
    driver = load_tool("bench_sparse", monkeypatch)
    tables = load_tool("bench_sparse_tables", monkeypatch)

    def row(method, sparsity, returns, parameters):
        summary = {"evaluations": [{"env_steps": 5_000 * (i + 1), "mean": m}
                                   for i, m in enumerate(returns)],
                   "networks": {"groups": {"all": {"nonzero_parameters": parameters}}}}
        setting = driver.Setting("td3", "Hopper-v5", 150_000, method, sparsity)
        return tables.Row(setting, [None], [summary])

    dense = row("dense", None, [2000.0] * 30, 1_000_000)
    # evaluations 16-30 (after 75k of 150k steps): 5 at 2,900 and 10 at 1,900
    fell = row("rlx2", (0.98, 0.95), [0.0] * 15 + [2900.0] * 5 + [1900.0] * 10, 40_000)
    kept = row("rlx2", (0.9, 0.85), [2000.0] * 30, 125_000)
    assert tables.second_half(fell.summaries[0]) == (5 * 2900 + 10 * 1900) / 15
    assert fell.scores == [1900.0]

    pace = "\n".join(tables.pace_table([dense, kept, fell], dense))
    assert "| rlx2-a98c95 | 50,000 | +31% | 111.7 [111.7, 111.7] | 1, 1 |" in pace
    assert tables.compression_table([dense, kept, fell], dense) == [
        "Ultimate compression ratio, rlx2: 8.0x (rlx2-a90c85, 1 seeds) "
        "(by the second half's mean: 25.0x (rlx2-a98c95, 1 seeds))."]


def test_long_runs_are_followed_along_their_course(monkeypatch, tmp_path):
    """At 1M steps each run gets a line: when it first reached half the best return here, and
    the 10-evaluation mean at each tenth of the run, so a run that learned late or fell over
    shows as such. Shorter budgets keep their tables as they were."""
    driver = load_tool("bench_sparse", monkeypatch)
    tables = load_tool("bench_sparse_tables", monkeypatch)

    def row(method, sparsity, returns, steps=1_000_000):
        every = steps // len(returns)
        summary = {"evaluations": [{"env_steps": every * (i + 1), "mean": m}
                                   for i, m in enumerate(returns)],
                   "updates": 1000,
                   "networks": {"groups": {"all": {"nonzero_parameters": 100}},
                                "train_flops": 1e6, "inference_flops": 100}}
        setting = driver.Setting("td3", "Hopper-v5", steps, method, sparsity)
        run = driver.Run(setting, 1, tmp_path / setting.label, tmp_path / "record.json")
        return tables.Row(setting, [run], [summary])

    # 200 evaluations, one every 5,000 steps: dense learns at once and holds 3,000; the
    # sparse run stays at 100 until 600k, reaches 4,000 there and falls to 500 after 900k
    dense = row("dense", None, [3000.0] * 200)
    late = row("rlx2", (0.98, 0.95), [100.0] * 119 + [4000.0] * 61 + [500.0] * 20)
    lines = tables.curve_table([dense, late])
    assert lines[0].startswith("| run | score | best | second half's mean | first at 2,000 ")
    assert lines[2] == ("| dense s1 | 3,000 | 3,000 | 3,000 | 5,000 | "
                        + ", ".join(["3,000"] * 10) + " |")
    assert lines[3] == ("| rlx2-a98c95 s1 | 500 | 4,000 | 2,559 | 600,000 | "
                        "100, 100, 100, 100, 100, 490, 4,000, 4,000, 4,000, 500 |")
    assert "first at" in "\n".join(tables.env_table(("td3", "Hopper-v5", 1_000_000),
                                                    [dense, late]))
    short = [row("dense", None, [3000.0] * 60, 300_000),
             row("rlx2", (0.98, 0.95), [100.0] * 60, 300_000)]
    assert "first at" not in "\n".join(tables.env_table(("td3", "Hopper-v5", 300_000), short))
