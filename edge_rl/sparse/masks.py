"""TFMOT pruning wrappers whose masks only edge-rl edits, and an Adam that honours them.

Every Dense layer of a sparse network is wrapped in TFMOT's `PruneLowMagnitude`. Its mask
variable is the one record of which connections exist. The wrapper's schedule, `NeverPrune`,
never lets TFMOT change a mask by itself; `edge_rl.sparse.topology` edits masks instead (RigL
regrowth, SET, a fixed mask, or TFMOT's gradual schedule driven by the training step).

The wrapper multiplies the kernel by the mask before each forward pass, but the gradient it
hands the optimizer is dense, so Adam would move pruned weights off zero between passes.
`MaskedAdam` puts them back to exactly zero right after every step.
"""

from __future__ import annotations

from typing import Any

import tensorflow_model_optimization as tfmot
from tensorflow_model_optimization.python.core.sparsity.keras import (
    pruning_schedule,
    pruning_wrapper,
)

from edge_rl.tf_setup import tf

PruneLowMagnitude = pruning_wrapper.PruneLowMagnitude


@tf.keras.utils.register_keras_serializable(package="edge_rl")
class NeverPrune(pruning_schedule.PruningSchedule):
    """A TFMOT schedule that never prunes: the masks belong to edge-rl's topology updater."""

    def __call__(self, step):
        return tf.constant(False), tf.constant(0.0)

    def get_config(self) -> dict[str, Any]:
        return {"class_name": "edge_rl>NeverPrune", "config": {}}


def dense(units: int, activation: str | None, name: str, sparse: bool = False):
    """A Dense layer; wrapped for pruning when the network is sparse."""
    layer = tf.keras.layers.Dense(units, activation=activation, name=name)
    if not sparse:
        return layer
    return tfmot.sparsity.keras.prune_low_magnitude(layer, pruning_schedule=NeverPrune())


def unwrap(layer):
    """The plain Keras layer inside a pruning wrapper (the layer itself otherwise). It shares
    the wrapper's kernel, which holds exact zeros where the mask is off."""
    return layer.layer if isinstance(layer, PruneLowMagnitude) else layer


def dense_layers(network) -> list:
    """A network's Dense layers in the order they were created: the pruning wrapper where a
    layer is wrapped, the plain layer otherwise."""
    modules = list(dict.fromkeys(network.submodules))
    wrapped = {id(m.layer) for m in modules if isinstance(m, PruneLowMagnitude)}
    found = [m for m in modules if isinstance(m, PruneLowMagnitude)
             or (isinstance(m, tf.keras.layers.Dense) and id(m) not in wrapped)]
    return sorted(found, key=lambda layer: _creation_order(unwrap(layer).name))


def pruned_layers(network) -> list:
    """The pruning wrappers of a network, in the order they were created."""
    return [layer for layer in dense_layers(network) if isinstance(layer, PruneLowMagnitude)]


def _creation_order(name: str) -> tuple[int, str]:
    # Layers are named ..._0, ..._1 in build order; names without an index come last.
    tail = name.rsplit("_", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 30, name)


def kernel_and_mask(layer) -> tuple[Any, Any]:
    kernel, mask, _threshold = layer.pruning_vars[0]
    return kernel, mask


class MaskRegistry:
    """The (kernel, mask) pairs an optimizer re-masks. A plain object, so that checkpoints of
    the optimizer do not start tracking the networks' variables through it."""

    def __init__(self) -> None:
        self.pairs: list[tuple[Any, Any]] = []


class _Remasking:
    """Sets pruned weights back to exactly zero after every optimizer step (a no-op for dense
    networks, whose registry stays empty)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.masks = MaskRegistry()

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        result = super().apply_gradients(grads_and_vars, *args, **kwargs)
        updated = {variable.ref() for _, variable in grads_and_vars}
        for kernel, mask in self.masks.pairs:
            if kernel.ref() in updated:
                kernel.assign(kernel * mask)
        return result


class MaskedAdam(_Remasking, tf.keras.optimizers.Adam):
    """Adam (tf-keras' optimizer) that keeps pruned weights at zero."""


class MaskedLegacyAdam(_Remasking, tf.keras.optimizers.legacy.Adam):
    """The legacy Adam that keeps pruned weights at zero (TF-Agents' SAC converts any other
    optimizer to a legacy one, which would lose the re-masking)."""


def optimizer_slots(optimizer, variable) -> list:
    """Adam's first and second moments of `variable` ([] before its first step)."""
    if isinstance(optimizer, tf.keras.optimizers.legacy.Optimizer):
        names = optimizer.get_slot_names()
        try:
            return [optimizer.get_slot(variable, name) for name in names]
        except KeyError:
            return []
    # tf-keras 2.15's optimizer has no public slot lookup; these are its own bookkeeping.
    index = getattr(optimizer, "_index_dict", {}).get(optimizer._var_key(variable))
    if index is None:
        return []
    return [optimizer._momentums[index], optimizer._velocities[index]]
