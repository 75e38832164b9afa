"""Late-run stability (edge_rl.runs.stability): what the report, summary and TensorBoard show."""

import pytest

from edge_rl.runs.stability import late_run_stability


def test_a_run_that_stays_at_its_best_is_stable():
    found = late_run_stability([20.0, 150.0, 500.0, 500.0, 498.0, 500.0])
    assert found["fraction"] == 1.0
    assert (found["best"], found["first_at"], found["later"]) == (500.0, 2, 3)


def test_swings_after_the_best_count_against_it():
    # the run: 500 first, then 91, 230, 112, 500, 500, 306, 190, 115, 500
    returns = [100.0, 500.0, 91.0, 230.0, 112.0, 500.0, 500.0, 306.0, 190.0, 115.0, 500.0]
    assert late_run_stability(returns)["fraction"] == pytest.approx(3 / 9)


def test_the_tolerance_is_a_fraction_of_the_best():
    # 476 is within 5% of 500, 474 is not
    assert late_run_stability([500.0, 476.0, 474.0])["fraction"] == 0.5
    assert late_run_stability([500.0, 474.0], tolerance=0.1)["fraction"] == 1.0


def test_negative_returns_use_the_magnitude_of_the_best():
    # Acrobot-like: best -80, within 5% means -84 or better
    found = late_run_stability([-500.0, -80.0, -83.0, -90.0, -84.0])
    assert found["best"] == -80.0 and found["fraction"] == pytest.approx(2 / 3)


def test_no_evaluation_after_the_best_has_no_fraction():
    assert late_run_stability([10.0, 20.0])["fraction"] is None
    assert late_run_stability([]) is None
