"""How closely an exported policy (int8, fp16) follows a reference one (fp32) on observations.

    numbers = compare_policies(fp32_policy, int8_policy, observations)
    print(verification_report(numbers, int8_policy, fp32_policy))

Needs only the device runtime, not TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edge_rl.device.policy import Policy

# What an exported (quantized) policy must hold against fp32 to be written (see
# `tolerance_failures` and `return_gap`).
MIN_AGREEMENT = 0.97  # greedy actions that match fp32's, over all observations
MIN_DECISIVE_AGREEMENT = 0.99  # ... where fp32's best action leads by > two output steps
MAX_MEAN_ACTION_ERROR = 0.02  # of the action range, averaged over observations and dimensions
MAX_RETURN_DROP = 0.10  # of fp32's mean greedy return's magnitude (or two standard errors)
CONFIRM_EPISODES = 10  # more episodes each, played before a return gap refuses a policy


def compare_policies(
    reference: Policy, candidate: Policy, observations: np.ndarray
) -> dict[str, Any]:
    """Greedy actions of `candidate` against `reference` on a batch of observations.

    Discrete policies: {"agreement": fraction of rows whose greedy actions match, "n": rows,
    "decisive_agreement": the same on the rows where the reference's best action leads the
    runner-up by more than two of the candidate's output steps (Policy.output_step),
    "decisive_n": those rows}. Near-ties are where int8 rounding flips actions, and where the
    choice matters least.
    Continuous: {"max_action_error", "mean_action_error": absolute differences of the greedy
    actions, "output_step": the candidate's output step in action units (0.0 for a float
    policy), "n": rows}. Where the step is taken before the squash to the action bounds
    ("mean_log_std" outputs, float output stages) it is an upper bound: that step times the
    action's largest half-range (tanh' <= 1).
    """
    if reference.metadata.discrete != candidate.metadata.discrete:
        raise ValueError("cannot compare a discrete policy with a continuous one")
    obs = np.asarray(observations, dtype=np.float32)
    if obs.ndim < 2 or not len(obs):
        raise ValueError(f"expected a batch of observations, got an array of shape {obs.shape}")
    reference_outputs = reference.outputs(obs)
    expected = reference.greedy(reference_outputs)
    actual = candidate.act(obs)
    n = int(len(obs))
    if reference.metadata.discrete:
        decisive = decisive_rows(reference_outputs, candidate.output_step)
        matches = expected == actual
        return {
            "agreement": float(np.mean(matches)),
            "n": n,
            "decisive_agreement": float(np.mean(matches[decisive])) if decisive.any() else 1.0,
            "decisive_n": int(decisive.sum()),
        }
    error = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    span = (candidate.high - candidate.low).astype(np.float64)
    relative = error / np.where(span > 0, span, 1.0)
    scale = candidate.output_step
    if candidate.metadata.output == "mean_log_std" or not candidate.output_quantization[0]:
        # a step before the squash (a float output stage's is): tanh's slope is at most 1
        scale *= float(np.max(0.5 * (candidate.high - candidate.low)))
    return {
        "max_action_error": float(error.max()),
        "mean_action_error": float(error.mean()),
        "mean_relative_error": float(relative.mean()),  # in action ranges
        "output_step": float(scale),
        "n": n,
    }


def decisive_rows(q_values: np.ndarray, output_step: float) -> np.ndarray:
    """Rows whose best action leads the runner-up by more than two output steps: where a
    quantized policy must agree (near-ties flip with one level of rounding)."""
    top_two = np.sort(q_values, axis=-1)[:, -2:]
    return (top_two[:, 1] - top_two[:, 0]) > 2 * output_step


def tolerance_failures(comparison: dict[str, Any]) -> list[str]:
    """What a comparison (`compare_policies`) misses of the export tolerances, one phrase each;
    [] when it holds them."""
    failures = []
    if "agreement" in comparison:
        if comparison["agreement"] < MIN_AGREEMENT:
            failures.append(f"greedy actions agree with fp32 on {comparison['agreement']:.1%} "
                            f"of observations (needs {MIN_AGREEMENT:.0%})")
        if comparison["decisive_agreement"] < MIN_DECISIVE_AGREEMENT:
            failures.append(f"{comparison['decisive_agreement']:.1%} where fp32's best action "
                            f"leads by more than two output steps (needs "
                            f"{MIN_DECISIVE_AGREEMENT:.0%})")
    elif comparison["mean_relative_error"] > MAX_MEAN_ACTION_ERROR:
        failures.append(f"mean action error {comparison['mean_relative_error']:.1%} of the "
                        f"action range against fp32 (at most {MAX_MEAN_ACTION_ERROR:.0%})")
    return failures


def return_gap(reference: list[float], candidate: list[float]) -> str | None:
    """A phrase when the candidate's greedy returns fall below the reference's by more than
    MAX_RETURN_DROP of its magnitude or two standard errors of the difference, whichever is
    larger (the same reset seeds for both); None otherwise."""
    ref, cand = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    n = min(len(ref), len(cand))
    if n == 0:
        return None
    spread = 0.0
    if n > 1:
        spread = 2.0 * float(np.sqrt(ref.var(ddof=1) / n + cand.var(ddof=1) / n))
    allowed = max(MAX_RETURN_DROP * abs(float(ref.mean())), spread)
    drop = float(ref.mean() - cand.mean())
    if drop <= allowed:
        return None
    return (f"greedy return {cand.mean():.1f} against fp32's {ref.mean():.1f} over {n} episodes "
            f"(at most {allowed:.1f} lower allowed)")


def confirmed_return_gap(reference: list[float], candidate: list[float],
                         play_more: Callable[[int, int], tuple[list[float], list[float]]]
                         ) -> str | None:
    """`return_gap`, but a gap seen on the first episodes is judged again with
    CONFIRM_EPISODES more of each policy, `play_more(first, count)` (the episodes' index,
    for their reset seeds; returns (reference's, candidate's)). Why: in a chaotic env (Pendulum
    before it has learned to balance) an action a rounding step off sends an episode down
    another path, and two or three such episodes can differ by more than a tenth by chance
    (a CI run's TD3 file: -1018.9 against -922.6 over 2). A real loss stays a loss over more."""
    gap = return_gap(reference, candidate)
    if gap is None:
        return None
    first = min(len(reference), len(candidate))
    more_reference, more_candidate = play_more(first, CONFIRM_EPISODES)
    return return_gap([*reference[:first], *more_reference],
                      [*candidate[:first], *more_candidate])


def verification_report(
    comparison: dict[str, Any], candidate: Policy, reference: Policy | None = None
) -> str:
    """A few human-readable lines: file sizes, then agreement or action error."""
    meta = candidate.metadata
    lines = [f"{meta.precision} policy: {_size(len(candidate.model))}"]
    if reference is not None:
        ratio = len(reference.model) / max(1, len(candidate.model))
        lines.append(
            f"{reference.metadata.precision} reference: {_size(len(reference.model))} "
            f"({ratio:.1f}x the size)"
        )
    n = comparison.get("n", 0)
    if "agreement" in comparison:
        lines.append(f"greedy actions agree on {comparison['agreement']:.2%} of {n} observations")
        if "decisive_agreement" in comparison:
            lines.append(
                f"  and on {comparison['decisive_agreement']:.2%} of the "
                f"{comparison['decisive_n']} where the reference's best action leads by more "
                "than two output steps"
            )
    else:
        line = (
            f"action error on {n} observations: max {comparison['max_action_error']:.4g}, "
            f"mean {comparison['mean_action_error']:.4g} "
            f"({comparison['mean_relative_error']:.2%} of the action range)"
        )
        step = comparison.get("output_step", 0.0)
        if step:
            line += (
                f" (output step {step:.4g}; max error "
                f"{comparison['max_action_error'] / step:.1f} steps)"
            )
        lines.append(line)
    return "\n".join(lines)


def _size(n_bytes: int) -> str:
    return f"{n_bytes} bytes ({n_bytes / 1024:.1f} KiB)"
