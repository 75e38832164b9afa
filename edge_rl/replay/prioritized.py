"""Prioritized replay (Schaul et al., 2016, proportional variant) on top of `Replay`.

A transition is drawn with probability p_i^alpha / sum_k p_k^alpha, where p_i is |TD error| + a
small constant from the last update that trained on it; a new transition gets the largest
priority seen so far, so it is trained on soon after it arrives. Each sample carries an
importance weight (N * P(i))^-beta / max, which undoes the bias of the uneven draw as beta
rises to 1 over the run (`anneal`).

Why DQN uses it (docs/learning.md, "prioritized replay"): CartPole's policies that fell had
learned to balance the pole and let the cart drift off the track, a failure whose states grow
rare in a uniform replay once the policy is good. Their TD errors stay large, so they keep
being drawn.

The priorities live in a sum tree (each node the sum of its two children, the leaves the ring's
slots), so a draw and an update cost a walk of log2(capacity) levels, vectorized over the
batch, where a cumulative sum over the whole replay cost ~3 ms a minibatch at 100k
transitions. A draw is stratified: one in each of n equal slices of the total priority.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edge_rl.device.wire import Transitions
from edge_rl.replay.buffer import Replay

BETA_START = 0.4  # Schaul et al.'s beta_0 for the proportional variant
PRIORITY_FLOOR = 1e-3  # added to |TD error|, so no transition becomes undrawable


class SumTree:
    """Non-negative values per slot in a binary tree of sums: set values, and find the slot
    where a running sum over the slots passes a target, in log2(slots) steps."""

    def __init__(self, slots: int):
        self.leaves = 1 << max(0, (slots - 1).bit_length())  # a power of two
        self.tree = np.zeros(2 * self.leaves, np.float64)  # node k: children 2k, 2k + 1

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def values(self, slots: np.ndarray) -> np.ndarray:
        return self.tree[self.leaves + slots]

    def set(self, slots: np.ndarray, values: np.ndarray | float) -> None:
        """Set each slot's value (where a slot repeats, its last value counts)."""
        values = np.broadcast_to(np.asarray(values, np.float64), np.shape(slots))
        unique, last = np.unique(np.asarray(slots)[::-1], return_index=True)
        nodes = self.leaves + unique
        self.tree[nodes] = values[::-1][last]
        while nodes[0] > 1:  # every node of a level at once, up to the root
            nodes = np.unique(nodes // 2)
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]

    def find(self, targets: np.ndarray) -> np.ndarray:
        """For each target in [0, total), the slot whose value covers it in the running sum."""
        nodes = np.ones(len(targets), np.int64)
        targets = np.minimum(targets, np.nextafter(self.total, 0))
        while nodes[0] < self.leaves:
            left = 2 * nodes
            # right where the target is past the left sum, unless rounding points at nothing
            right = (targets >= self.tree[left]) & (self.tree[left + 1] > 0)
            targets = np.where(right, targets - self.tree[left], targets)
            nodes = np.where(right, left + 1, left)
        return nodes - self.leaves


class PrioritizedReplay(Replay):
    """Replay drawn in proportion to each transition's last |TD error| to the power `alpha`."""

    prioritized = True

    def __init__(self, *args: Any, alpha: float = 0.6, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if not alpha > 0:
            raise ValueError(f"prioritized replay needs alpha > 0, not {alpha}")
        self.alpha = float(alpha)
        self.beta = BETA_START
        self.priorities = SumTree(self.capacity)  # p_i^alpha per ring slot; 0 where empty
        # which insert filled each slot, so a priority update for an overwritten slot is dropped
        self.filled_by = np.full(self.capacity, -1, np.int64)
        self.max_priority = 1.0

    def priority(self, positions: np.ndarray) -> np.ndarray:
        """p_i^alpha of the transitions at `positions`."""
        return self.priorities.values(positions)

    def anneal(self, progress: float) -> None:
        """Set beta for a run `progress` (0 to 1) of the way through: BETA_START to 1."""
        self.beta = BETA_START + (1.0 - BETA_START) * min(1.0, max(0.0, progress))

    def insert(self, actor_key: int, transitions: Transitions) -> None:
        begin = (self.start + self.size) % self.capacity
        first = self.inserted_total
        super().insert(actor_key, transitions)
        positions = (begin + np.arange(len(transitions))) % self.capacity
        self.priorities.set(positions, self.max_priority)
        self.filled_by[positions] = first + np.arange(len(transitions))

    def _draw(self, n: int) -> np.ndarray:
        # one draw in each of n equal slices of the total: the batch covers the distribution
        targets = (np.arange(n) + self.rng.random(n)) * (self.priorities.total / n)
        return self.priorities.find(targets)

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """As `Replay.sample`, drawn by priority, plus `weights` (importance weights, the
        largest 1) and `positions`/`filled_by` (for `update_priorities`)."""
        batch, index = self._sample_with_index(batch_size)
        probability = self.priority(index) / self.priorities.total
        weights = (self.size * probability) ** -self.beta
        batch["weights"] = (weights / weights.max()).astype(np.float32)
        batch["positions"] = index
        batch["filled_by"] = self.filled_by[index].copy()
        return batch

    def update_priorities(self, batch: dict[str, np.ndarray], td_errors: np.ndarray) -> None:
        """New priorities for the transitions `batch` (from `sample`) held, from the TD errors
        an update computed on them; slots overwritten since are left alone."""
        td_errors = np.abs(np.asarray(td_errors, np.float64).reshape(-1))
        positions = batch["positions"]
        still_there = self.filled_by[positions] == batch["filled_by"]
        if not still_there.any():
            return
        priority = (td_errors[still_there] + PRIORITY_FLOOR) ** self.alpha
        self.priorities.set(positions[still_there], priority)
        self.max_priority = max(self.max_priority, float(priority.max()))

    def drop_oldest(self, n: int) -> None:
        dropped = self.positions()[:max(0, min(int(n), self.size))]
        super().drop_oldest(n)
        if len(dropped):
            self.priorities.set(dropped, 0.0)
            self.filled_by[dropped] = -1

    # -- checkpoints: the priorities travel with the transitions, oldest first --------------

    def _saved_extras(self, order: np.ndarray) -> dict[str, np.ndarray]:
        return {"priority": self.priority(order), "filled_by": self.filled_by[order],
                "priority_state": np.asarray([self.max_priority, self.beta])}

    def _load_extras(self, saved: Any, n: int) -> None:
        self.priorities = SumTree(self.capacity)
        self.filled_by = np.full(self.capacity, -1, np.int64)
        if n == 0:
            return
        if "priority" in saved:
            self.priorities.set(np.arange(n), saved["priority"])
            self.filled_by[:n] = saved["filled_by"]
            self.max_priority, self.beta = (float(x) for x in saved["priority_state"])
        else:  # saved by a uniform replay: every transition starts equal
            self.priorities.set(np.arange(n), self.max_priority)
            self.filled_by[:n] = self.inserted_total - n + np.arange(n)
