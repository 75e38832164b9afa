"""What a run's networks cost: sparsity per layer, nonzero parameters, FLOPs against dense."""

from __future__ import annotations

from typing import Any

import numpy as np

from edge_rl.algorithm import BuiltAgent
from edge_rl.sparse.flops import GroupCount, LayerCount, flops_report
from edge_rl.sparse.masks import PruneLowMagnitude, dense_layers, kernel_and_mask, unwrap


def layer_counts(network) -> list[dict[str, Any]]:
    """Per Dense layer of `network`, in creation order: name, kernel shape, active weights."""
    counts = []
    for layer in dense_layers(network):
        kernel = unwrap(layer).kernel
        n_in, n_out = (int(d) for d in kernel.shape)
        active = n_in * n_out
        if isinstance(layer, PruneLowMagnitude):
            active = int(np.count_nonzero(kernel_and_mask(layer)[1].numpy()))
        counts.append({"layer": unwrap(layer).name, "shape": [n_in, n_out], "active": active,
                       "sparsity": round(1 - active / (n_in * n_out), 4)})
    return counts


def network_report(built: BuiltAgent, batch_size: int, updates: int, topology_updates: int
                   ) -> dict[str, Any]:
    """Per group: sparsity and nonzero parameters; per layer: active weights; and training and
    inference FLOPs relative to the same architecture dense."""
    layers, groups, counts = [], {}, {}
    for group in built.groups:
        active = size = nonzero = dense = 0
        for n, network in enumerate(group.networks):
            network_counts = []
            for count in layer_counts(network):
                (n_in, n_out), on = count["shape"], count["active"]
                network_counts.append(LayerCount(n_in, n_out, on))
                active, size = active + on, size + n_in * n_out
                nonzero, dense = nonzero + on + n_out, dense + n_in * n_out + n_out
                if n == 0:
                    layers.append({"group": group.name, **count})
            if n == 0:
                counts[group.name] = GroupCount(network_counts, group.passes, len(group.networks))
        groups[group.name] = {
            "sparsity": round(1 - active / size, 4),
            "nonzero_parameters": nonzero,
            "dense_parameters": dense,
        }
    inference = next((g.name for g in built.groups if g.role == "actor"), None)
    if inference is None:  # an algorithm that declares no groups (it trains dense only)
        return {"groups": groups, "layers": layers}
    return {
        "groups": groups,
        "layers": layers,
        **flops_report(counts, inference, batch_size, updates, topology_updates),
    }
