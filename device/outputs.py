"""Output kinds: what a policy network's outputs mean, and how a device turns them into actions.

A policy file names its kind (PolicyMetadata.output). Each `OutputKind` says how many output
tensors the network has (the greedy action first when two) and the noise-free action of each
row; exploration (edge_rl.device.exploration) then works from both. An algorithm with outputs
of another meaning registers its kind with `register_output_kind`, on the learner and on its
actors' devices alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Greedy = Callable[[np.ndarray, "np.ndarray | None", "np.ndarray | None"], np.ndarray]


@dataclass(frozen=True)
class OutputKind:
    name: str
    outputs: int  # output tensors of the network
    greedy: Greedy  # (outputs, action low, action high) -> the noise-free actions


OUTPUT_KINDS: dict[str, OutputKind] = {}


def register_output_kind(kind: OutputKind) -> OutputKind:
    """Make `kind` known to policy files, the converter and the device runtime."""
    OUTPUT_KINDS[kind.name] = kind
    return kind


def output_count(name: str) -> int:
    """Output tensors of a network of output kind `name`."""
    return OUTPUT_KINDS[name].outputs


def greedy_actions(output_kind: str, outputs: np.ndarray, low: np.ndarray | None,
                   high: np.ndarray | None) -> np.ndarray:
    """The noise-free actions for rows of a policy network's outputs."""
    return OUTPUT_KINDS[output_kind].greedy(outputs, low, high)


def squash_to_bounds(unit: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Map values in [-1, 1] onto [low, high]."""
    return (low + (unit + 1.0) * 0.5 * (high - low)).astype(np.float32)


# One output, argmax is the action (DQN).
register_output_kind(OutputKind(
    "q_values", 1, lambda outputs, low, high: np.argmax(outputs, axis=-1).astype(np.int64)))
# One output, the action in the env's units (TD3, D4PG).
register_output_kind(OutputKind(
    "action", 1, lambda outputs, low, high: np.clip(outputs, low, high)))
# SAC: output 0 the greedy action in the env's units, output 1 the pre-squash Gaussian's mean
# and log-std, concatenated, which actors sample from (read as one [greedy, mean, log-std] row).
register_output_kind(OutputKind(
    "squashed_gaussian", 2,
    lambda outputs, low, high: np.clip(outputs[..., : outputs.shape[-1] // 3], low, high)))
# SAC files written before squashed_gaussian: one output, the mean and log-std; the mode is the
# squashed mean.
register_output_kind(OutputKind(
    "mean_log_std", 1,
    lambda outputs, low, high: squash_to_bounds(
        np.tanh(outputs[..., : outputs.shape[-1] // 2]), low, high)))
