"""How closely an exported policy (int8, fp16) follows a reference one (fp32) on observations.

    numbers = compare_policies(fp32_policy, int8_policy, observations)
    print(verification_report(numbers, int8_policy, fp32_policy))

Needs only the device runtime, not TensorFlow.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edge_rl.device.policy import Policy


def compare_policies(
    reference: Policy, candidate: Policy, observations: np.ndarray
) -> dict[str, Any]:
    """Greedy actions of `candidate` against `reference` on a batch of observations.

    Discrete policies: {"agreement": fraction of rows whose greedy actions match, "n": rows,
    "decisive_agreement": the same on the rows where the reference's best action leads the
    runner-up by more than two of the candidate's output steps, "decisive_n": those rows}.
    Near-ties are where int8 rounding flips actions, and where the choice matters least.
    Continuous: {"max_action_error", "mean_action_error": absolute differences of the greedy
    actions, "output_step": the candidate's output quantization step in action units (0.0 when
    its output is not quantized), "n": rows}. For "mean_log_std" outputs the step is an upper
    bound: the output scale times the action's largest half-range (tanh' <= 1).
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
        top_two = np.sort(reference_outputs, axis=-1)[:, -2:]
        decisive = (top_two[:, 1] - top_two[:, 0]) > 2 * candidate.output_quantization[0]
        matches = expected == actual
        return {
            "agreement": float(np.mean(matches)),
            "n": n,
            "decisive_agreement": float(np.mean(matches[decisive])) if decisive.any() else 1.0,
            "decisive_n": int(decisive.sum()),
        }
    error = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    scale, _ = candidate.output_quantization
    if candidate.metadata.output == "mean_log_std":
        scale *= float(np.max(0.5 * (candidate.high - candidate.low)))
    return {
        "max_action_error": float(error.max()),
        "mean_action_error": float(error.mean()),
        "output_step": float(scale),
        "n": n,
    }


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
            f"mean {comparison['mean_action_error']:.4g}"
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
