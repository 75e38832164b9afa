"""The mask updater: which connections of each sparse layer exist, and how that changes.

    rigl    every interval, per layer: drop the zeta * n_active smallest-magnitude weights,
            grow as many missing connections where the dense gradient of the layer's loss on
            the current training batch is largest (Evci et al., 2020; RLx2, Tan et al., 2023)
    set     the same, growing at random (Mocanu et al., 2018)
    static  a random mask, fixed for the whole run
    prune   dense at first, then TFMOT's gradual magnitude pruning (PolynomialDecay) to each
            layer's target, with the schedule's step the training step, not TFMOT's count of
            network calls

zeta follows a cosine from `drop_fraction` to 0 at `topology_end`. Grown weights start at
zero with fresh optimizer moments, so a regrown connection does not inherit stale momentum.
Every layer keeps exactly its ERK (or uniform) count of active weights, and each change is
copied to the target networks, which always carry the online network's masks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
from tensorflow_model_optimization.python.core.sparsity.keras import pruning_schedule

from edge_rl.algorithm import SparseGroup
from edge_rl.sparse.distribution import active_counts, layer_densities
from edge_rl.sparse.masks import kernel_and_mask, optimizer_slots, pruned_layers
from edge_rl.tf_setup import tf

log = logging.getLogger(__name__)




@dataclass
class SparseLayer:
    group: str
    name: str
    wrapper: Any  # the online PruneLowMagnitude layer
    target_wrappers: list
    optimizer: Any
    density: float  # the fraction of the kernel kept at the end
    active: int  # weights kept at the end
    schedule: Any = None  # prune: TFMOT's PolynomialDecay for this layer

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(int(d) for d in kernel_and_mask(self.wrapper)[0].shape)

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]


@dataclass
class TopologyChange:
    """What one update did to one layer (for logs and tests)."""

    layer: str
    dropped: np.ndarray  # flat indices of the connections removed
    grown: np.ndarray  # flat indices of the connections added


@dataclass
class Topology:
    """The sparse layers of an agent and the rule that evolves their masks."""

    method: str
    layers: list[SparseLayer]
    seed: int
    drop_fraction: float
    end_step: int  # env steps: no topology changes from here on

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def build(cls, groups: list[SparseGroup], sparsities: dict[str, float], method: str,
              distribution: str, seed: int, drop_fraction: float, end_step: int) -> Topology:
        """Masks for every group's layers: random ones with exactly the ERK/uniform count of
        active weights (all ones for prune, which starts dense), copied to the targets."""
        layers = []
        for group in groups:
            sparse_nets = [pruned_layers(net) for net in group.networks]
            target_nets = [pruned_layers(net) for net in group.targets]
            shapes = [tuple(int(d) for d in kernel_and_mask(w)[0].shape) for w in sparse_nets[0]]
            densities = layer_densities(shapes, sparsities[group.role], distribution)
            counts = active_counts(shapes, densities)
            for n, wrappers in enumerate(sparse_nets):
                targets_of_net = target_nets[n] if n < len(target_nets) else []
                for i, wrapper in enumerate(wrappers):
                    layers.append(SparseLayer(
                        group=group.name,
                        name=f"{group.name}{n if len(sparse_nets) > 1 else ''}/"
                             f"{wrapper.layer.name}",
                        wrapper=wrapper,
                        target_wrappers=[targets_of_net[i]] if targets_of_net else [],
                        optimizer=group.optimizer,
                        density=densities[i],
                        active=counts[i],
                    ))
                group.optimizer.masks.pairs.extend(kernel_and_mask(w) for w in wrappers)
        for layer in layers:
            for wrapper in [layer.wrapper, *layer.target_wrappers]:
                # A deep copy of an unbuilt wrapper keeps pruning the original's kernel.
                if kernel_and_mask(wrapper)[0] is not wrapper.layer.kernel:
                    raise ValueError(f"{layer.name}: the pruning wrapper masks another layer's "
                                     "kernel (copied before it was built?)")
                # TFMOT's call counter starts at -1; a training-mode call asserts it is positive
                wrapper.pruning_step.assign(0)
        topology = cls(method, layers, seed, drop_fraction, end_step)
        rng = np.random.default_rng([seed, 0])
        for layer in layers:
            if method == "prune":
                # from 20% to 80% of the topology's span, as "The State of Sparse Training in
                # Deep RL" pruned; the weights get some training dense first, and some sparse
                begin = end_step // 5
                layer.schedule = pruning_schedule.PolynomialDecay(
                    initial_sparsity=0.0, final_sparsity=1.0 - layer.density,
                    begin_step=begin, end_step=max(begin + 1, 4 * end_step // 5), frequency=1,
                )
                continue
            mask = np.zeros(layer.size, bool)
            mask[rng.choice(layer.size, layer.active, replace=False)] = True
            topology._set_mask(layer, mask.reshape(layer.shape), grown=None)
        return topology

    # -- the schedule -----------------------------------------------------------------------------

    def zeta(self, step: int) -> float:
        """The fraction of active weights rigl/set replace at env step `step`."""
        if step >= self.end_step:
            return 0.0
        return self.drop_fraction / 2.0 * (1.0 + math.cos(math.pi * step / self.end_step))

    def active(self, step: int) -> bool:
        return self.method in ("rigl", "set", "prune") and step < self.end_step

    # -- updates ---------------------------------------------------------------------------------

    def update(self, step: int, gradients: dict[str, Any] | None = None,
               groups: Collection[str] | None = None) -> list[TopologyChange]:
        """One topology update at env step `step` of the layers of `groups` (None: all). rigl
        needs `gradients`: layer name -> the dense gradient of the layer's loss with respect to
        its kernel (see `kernel_gradients`).
        """
        if not self.active(step):
            return []
        if self.method == "prune":
            return [self._prune(layer, step) for layer in self.layers]
        zeta = self.zeta(step)
        rng = np.random.default_rng([self.seed, step])
        changes = []
        for layer in self.layers:
            if groups is not None and layer.group not in groups:
                continue
            kernel, mask_var = kernel_and_mask(layer.wrapper)
            weights = kernel.numpy().ravel()
            mask = mask_var.numpy().ravel() > 0.5
            n_drop = int(math.floor(zeta * mask.sum()))
            if n_drop == 0 or mask.all():  # a dense layer (ERK kept it whole) stays dense
                changes.append(TopologyChange(layer.name, np.zeros(0, int), np.zeros(0, int)))
                continue
            tiebreak = rng.random(mask.size)  # equal scores are broken at random
            active = np.flatnonzero(mask)
            dropped = active[np.lexsort((tiebreak[active], np.abs(weights[active])))[:n_drop]]
            kept = mask.copy()
            kept[dropped] = False
            if self.method == "rigl":
                score = np.abs(gradients[layer.name].ravel())
            else:
                score = rng.random(mask.size)
            candidates = np.flatnonzero(~kept)
            order = np.lexsort((tiebreak[candidates], -score[candidates]))
            grown = candidates[order[:n_drop]]
            new_mask = kept.copy()
            new_mask[grown] = True
            self._set_mask(layer, new_mask.reshape(layer.shape), grown=grown)
            changes.append(TopologyChange(layer.name, dropped, grown))
        log.info("topology update at %d env steps: zeta %.3f, %d connections replaced",
                 step, zeta, sum(len(c.grown) for c in changes))
        return changes

    def _prune(self, layer: SparseLayer, step: int) -> TopologyChange:
        """Keep the largest-magnitude weights, as many as the layer's schedule allows now."""
        _, sparsity = layer.schedule(tf.constant(step, tf.int64))
        keep = max(1, int(round((1.0 - float(sparsity)) * layer.size)))
        kernel, mask_var = kernel_and_mask(layer.wrapper)
        mask = mask_var.numpy().ravel() > 0.5
        weights = np.where(mask, np.abs(kernel.numpy().ravel()), -1.0)  # never regrow
        keep = min(keep, int(mask.sum()))
        kept = np.zeros(mask.size, bool)
        kept[np.argsort(-weights, kind="stable")[:keep]] = True
        self._set_mask(layer, kept.reshape(layer.shape), grown=None)
        return TopologyChange(layer.name, np.flatnonzero(mask & ~kept), np.zeros(0, int))

    def _set_mask(self, layer: SparseLayer, mask: np.ndarray, grown: np.ndarray | None) -> None:
        """Write `mask` to the layer and its targets; zero what is off and what was grown, and
        reset the optimizer moments of grown weights."""
        mask32 = mask.astype(np.float32)
        kernel, mask_var = kernel_and_mask(layer.wrapper)
        weights = kernel.numpy() * mask32
        if grown is not None and len(grown):
            weights.ravel()[grown] = 0.0
            for slot in optimizer_slots(layer.optimizer, kernel):
                values = slot.numpy()
                values.ravel()[grown] = 0.0
                slot.assign(values)
        kernel.assign(weights)
        mask_var.assign(mask32)
        for target in layer.target_wrappers:
            target_kernel, target_mask = kernel_and_mask(target)
            target_weights = target_kernel.numpy() * mask32
            if grown is not None and len(grown):
                target_weights.ravel()[grown] = 0.0
            target_kernel.assign(target_weights)
            target_mask.assign(mask32)

    # -- accounting ------------------------------------------------------------------------------

    def layer_stats(self) -> list[dict[str, Any]]:
        """Per layer: shape, target density, active weights now."""
        stats = []
        for layer in self.layers:
            mask = kernel_and_mask(layer.wrapper)[1].numpy()
            stats.append({
                "layer": layer.name,
                "group": layer.group,
                "shape": list(layer.shape),
                "target_density": round(layer.density, 6),
                "active": int(np.count_nonzero(mask)),
                "size": layer.size,
                "sparsity": round(1.0 - np.count_nonzero(mask) / layer.size, 6),
            })
        return stats


def kernel_gradients(topology: Topology, losses: dict[str, Any]) -> dict[str, np.ndarray]:
    """The dense gradient of each group's loss with respect to each of its layers' kernels.

    `losses` maps group names to zero-argument callables computing the loss on the current
    training batch, so that the tape sees the forward pass."""
    gradients: dict[str, np.ndarray] = {}
    for group, loss_fn in losses.items():
        layers = [layer for layer in topology.layers if layer.group == group]
        if not layers:
            continue
        kernels = [kernel_and_mask(layer.wrapper)[0] for layer in layers]
        with tf.GradientTape() as tape:
            loss = loss_fn()
        for layer, gradient in zip(layers, tape.gradient(loss, kernels), strict=True):
            gradients[layer.name] = (np.zeros(layer.shape, np.float32) if gradient is None
                                     else gradient.numpy())
    return gradients
