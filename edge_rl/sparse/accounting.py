"""What a run's networks cost: sparsity per layer, nonzero parameters, FLOPs against dense."""

from __future__ import annotations

from typing import Any

import numpy as np

from edge_rl.agents.base import BuiltAgent
from edge_rl.sparse.flops import GroupCount, LayerCount, flops_report
from edge_rl.sparse.masks import PruneLowMagnitude, creation_order, kernel_and_mask
from edge_rl.tf_setup import tf


def dense_layers(network) -> list[tuple[str, Any, Any]]:
    """(name, kernel, mask or None) of each Dense layer of `network`, in creation order."""
    found, inside = [], set()
    for module in network.submodules:
        if isinstance(module, PruneLowMagnitude):
            kernel, mask = kernel_and_mask(module)
            found.append((module.layer.name, kernel, mask))
            inside.add(id(module.layer))
    for module in network.submodules:
        if isinstance(module, tf.keras.layers.Dense) and id(module) not in inside:
            found.append((module.name, module.kernel, None))
    return sorted(found, key=lambda item: creation_order(item[0]))


def network_report(built: BuiltAgent, batch_size: int, updates: int, topology_updates: int
                   ) -> dict[str, Any]:
    """Per group: sparsity and nonzero parameters; per layer: active weights; and training and
    inference FLOPs relative to the same architecture dense."""
    layers, groups, counts = [], {}, {}
    for group in built.groups:
        active = size = nonzero = dense = 0
        for n, network in enumerate(group.networks):
            network_counts = []
            for name, kernel, mask in dense_layers(network):
                n_in, n_out = (int(d) for d in kernel.shape)
                on = int(np.count_nonzero(mask.numpy())) if mask is not None else n_in * n_out
                network_counts.append(LayerCount(n_in, n_out, on))
                active, size = active + on, size + n_in * n_out
                nonzero, dense = nonzero + on + n_out, dense + n_in * n_out + n_out
                if n == 0:
                    layers.append({"group": group.name, "layer": name, "shape": [n_in, n_out],
                                   "active": on, "sparsity": round(1 - on / (n_in * n_out), 4)})
            if n == 0:
                counts[group.name] = GroupCount(network_counts, group.passes, len(group.networks))
        groups[group.name] = {
            "sparsity": round(1 - active / size, 4),
            "nonzero_parameters": nonzero,
            "dense_parameters": dense,
        }
    inference = next(g.name for g in built.groups if g.role == "actor")
    return {
        "groups": groups,
        "layers": layers,
        **flops_report(counts, inference, batch_size, updates, topology_updates),
    }
