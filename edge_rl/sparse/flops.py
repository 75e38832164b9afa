"""FLOPs of training and inference, counted analytically as the RLx2 paper counts them.

A Dense layer's forward pass over one sample costs 2 FLOPs per active weight (a multiply and
an add) plus one per output (the bias): a sparse matmul costs its nonzeros only. A backward
pass costs twice its forward pass (gradients with respect to the inputs and to the weights).
Per update, each group of networks runs some forward and backward passes per sample
(`SparseGroup.passes`, set by the algorithm); a RigL topology update adds, per group, one
forward pass and one dense backward pass over a batch (the dense gradient it grows by).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LayerCount:
    inputs: int
    outputs: int
    active: int  # nonzero kernel weights


def forward_flops(layers: Sequence[LayerCount]) -> int:
    """FLOPs of one sample through these layers."""
    return sum(2 * layer.active + layer.outputs for layer in layers)


@dataclass(frozen=True)
class GroupCount:
    """Networks of one shape trained by one loss (TD3's two critics are one group)."""

    layers: Sequence[LayerCount]  # of one network
    passes: tuple[float, float]  # (forward, backward) passes of one network per sample/update
    networks: int = 1  # how many such networks (for the topology updates' gradients)

    def dense(self) -> GroupCount:
        layers = [LayerCount(x.inputs, x.outputs, x.inputs * x.outputs) for x in self.layers]
        return GroupCount(layers, self.passes, self.networks)


def update_flops(forward: float, passes: tuple[float, float]) -> float:
    """FLOPs per sample that one update spends on a network with `forward` FLOPs."""
    forward_passes, backward_passes = passes
    return forward * (forward_passes + 2 * backward_passes)


def training_flops(groups: Sequence[GroupCount], batch_size: int, updates: int,
                   topology_updates: int = 0) -> float:
    """Total FLOPs of `updates` updates and `topology_updates` RigL topology updates."""
    total = 0.0
    for group in groups:
        sparse = forward_flops(group.layers)
        total += updates * batch_size * update_flops(sparse, group.passes)
        # the grow signal: a forward pass, then a backward pass through the dense kernels
        dense_backward = 2 * forward_flops(group.dense().layers)
        total += topology_updates * batch_size * group.networks * (sparse + dense_backward)
    return total


def flops_report(groups: dict[str, GroupCount], inference_group: str, batch_size: int,
                 updates: int, topology_updates: int) -> dict[str, float]:
    """Training FLOPs of the run and inference FLOPs per sample, and both relative to the same
    networks dense."""
    updates = max(updates, 1)
    sparse = training_flops(list(groups.values()), batch_size, updates, topology_updates)
    dense = training_flops([g.dense() for g in groups.values()], batch_size, updates)
    inference = groups[inference_group]
    return {
        "train_flops": sparse,
        "inference_flops": forward_flops(inference.layers),
        "train_flops_vs_dense": round(sparse / dense, 4),
        "inference_flops_vs_dense": round(
            forward_flops(inference.layers) / forward_flops(inference.dense().layers), 4),
    }
