"""Replay: a ring of transitions in arrival order, with n-step returns built at sample time.

Each transition remembers where the next transition of the same actor episode landed
(`successor`), so n-step returns can be assembled for any sampled transition even when many
actors' batches interleave. A successor is trusted only if the slot still holds the same
(actor, episode, step + 1): ring overwrites and resizes can never splice two episodes.

With n steps and discount gamma, a sample's reward is sum_k gamma^k r_k over the k <= n steps
that exist, and its discount is gamma^(k-1) (0 if the last step terminated), so that a
TF-Agents agent, which bootstraps with gamma * discount * Q(next), uses gamma^k. Rewards stop
at episode ends; truncation bootstraps, termination does not.

With `once` (image observations: edge_rl.device.observations), each observation is stored
once: a transition's next observation is its successor's observation, and only transitions
without a successor (an episode's last, or the newest of an episode still running) keep theirs,
in `final_observations`, until a successor arrives. Frames then cost one copy per transition
plus one per episode, not two per transition.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_rl.core import ReplayBuffer
from edge_rl.device.observations import VECTOR
from edge_rl.device.wire import Transitions

_FIELDS = (
    "observation", "next_observation", "action", "deterministic_action", "reward",
    "terminated", "truncated", "actor_key", "episode_id", "episode_step", "successor",
)


class Replay(ReplayBuffer):
    """Uniform replay over the newest `capacity` transitions."""

    def __init__(
        self,
        capacity: int,
        observation_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: str,
        gamma: float,
        nstep: int = 1,
        seed: int = 0,
        observation_dtype: str = VECTOR.stored_dtype,  # as the observation kind stores them
        once: bool = False,  # each observation stored once (the kind's `once`)
    ):
        self.capacity = int(capacity)
        self.once = once
        self.gamma = float(gamma)
        self.nstep = int(nstep)
        self.rng = np.random.default_rng(seed)
        self._shapes = {
            "observation": (tuple(observation_shape), np.dtype(observation_dtype)),
            "next_observation": (tuple(observation_shape), np.dtype(observation_dtype)),
            "action": (tuple(action_shape), np.dtype(action_dtype)),
            "deterministic_action": (tuple(action_shape), np.dtype(action_dtype)),
            "reward": ((), np.float32),
            "terminated": ((), np.bool_),
            "truncated": ((), np.bool_),
            "actor_key": ((), np.int64),
            "episode_id": ((), np.int64),
            "episode_step": ((), np.int64),
            "successor": ((), np.int64),
        }
        if once:
            del self._shapes["next_observation"]
        # position -> next observation, for stored transitions without a successor (`once`)
        self.final_observations: dict[int, np.ndarray] = {}
        self.data = self._allocate(self.capacity)
        self.start = 0  # position of the oldest transition
        self.size = 0
        self.inserted_total = 0
        self._tails: dict[tuple[int, int], int] = {}  # open episode -> its newest position

    def _allocate(self, capacity: int) -> dict[str, np.ndarray]:
        data = {
            name: np.zeros((capacity, *shape), dtype)
            for name, (shape, dtype) in self._shapes.items()
        }
        data["actor_key"][:] = -1
        data["successor"][:] = -1
        return data

    def __len__(self) -> int:
        return self.size

    def insert(self, actor_key: int, transitions: Transitions) -> None:
        n = len(transitions)
        if n > self.capacity:
            raise ValueError(f"a batch of {n} transitions does not fit a replay of {self.capacity}")
        if n == 0:
            return
        begin = (self.start + self.size) % self.capacity  # the slot after the newest
        positions = (begin + np.arange(n)) % self.capacity
        overflow = max(0, self.size + n - self.capacity)
        self.start = (self.start + overflow) % self.capacity
        self.size = min(self.capacity, self.size + n)
        self.inserted_total += n

        # The batch lands in one slice of the ring, or two where it wraps (slices copy several
        # times faster than index arrays).
        head = min(n, self.capacity - begin)
        slices = [(slice(begin, begin + head), slice(0, head)),
                  (slice(0, n - head), slice(head, n))]
        d = self.data
        stored = [name for name in ("observation", "next_observation", "action",
                                    "deterministic_action", "reward", "terminated", "truncated",
                                    "episode_id", "episode_step") if name in d]
        for ring, batch in slices:
            for name in stored:
                d[name][ring] = getattr(transitions, name)[batch]
            d["actor_key"][ring] = actor_key
            d["successor"][ring] = -1

        # Successor links, made per episode: sort the batch by episode (stably, so each
        # episode's transitions stay in arrival order); neighbours in that order are an
        # episode's consecutive transitions. Python only loops over the batch's episodes.
        ended = transitions.terminated | transitions.truncated
        order = np.argsort(transitions.episode_id, kind="stable")
        episode = transitions.episode_id[order]
        step = transitions.episode_step[order]
        position = positions[order]
        closes = ended[order]
        starts = np.flatnonzero(np.concatenate(([True], episode[1:] != episode[:-1])))
        finals = np.concatenate((starts[1:] - 1, [n - 1]))
        # An episode's first transition in this batch continues the tail left by earlier
        # batches, if that slot still holds the step before it.
        for first, final in zip(starts.tolist(), finals.tolist(), strict=True):
            key = (actor_key, int(episode[first]))
            previous = self._tails.pop(key, None)
            if previous is not None and self._holds(previous, key, step[first] - 1):
                d["successor"][previous] = position[first]
                self.final_observations.pop(previous, None)  # its successor holds it now
            if not closes[final]:
                self._tails[key] = int(position[final])
        # Within the batch: link each transition to the next one of its episode unless it
        # ended the episode or a step is missing between them.
        link = (episode[1:] == episode[:-1]) & ~closes[:-1] & (step[1:] == step[:-1] + 1)
        d["successor"][position[:-1][link]] = position[1:][link]
        if self.once:
            # overwritten slots lose their kept observations; the batch's transitions without
            # a successor keep theirs
            for slot in positions.tolist():
                self.final_observations.pop(slot, None)
            unlinked = np.concatenate((~link, [True]))  # in episode-sorted order
            for row, slot in zip(order[unlinked].tolist(), position[unlinked].tolist(),
                                 strict=True):
                self.final_observations[slot] = transitions.next_observation[row].copy()

    def _holds(self, position: int, key: tuple[int, int], step: int) -> bool:
        d = self.data
        return (
            d["actor_key"][position] == key[0]
            and d["episode_id"][position] == key[1]
            and d["episode_step"][position] == step
        )

    def positions(self) -> np.ndarray:
        """Positions of the stored transitions, oldest first."""
        return (self.start + np.arange(self.size)) % self.capacity

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay")
        d = self.data
        index = (self.start + self.rng.integers(0, self.size, size=batch_size)) % self.capacity
        reward = d["reward"][index].astype(np.float64)
        steps = np.ones(batch_size, np.int64)
        last = index.copy()
        alive = ~(d["terminated"][index] | d["truncated"][index])
        for k in range(1, self.nstep):
            following = d["successor"][last]
            ok = alive & (following >= 0)
            following = np.where(ok, following, 0)
            ok &= (
                (d["actor_key"][following] == d["actor_key"][last])
                & (d["episode_id"][following] == d["episode_id"][last])
                & (d["episode_step"][following] == d["episode_step"][last] + 1)
            )
            reward += np.where(ok, self.gamma**k * d["reward"][following], 0.0)
            last = np.where(ok, following, last)
            steps += ok
            alive = ok & ~(d["terminated"][last] | d["truncated"][last])
        discount = np.where(d["terminated"][last], 0.0, self.gamma ** (steps - 1))
        return {
            "observation": d["observation"][index],
            "action": d["action"][index],
            "reward": reward.astype(np.float32),
            "discount": discount.astype(np.float32),
            "next_observation": self.next_observations(last),
        }

    def next_observations(self, positions: np.ndarray) -> np.ndarray:
        """The next observation of the transition at each of `positions`."""
        d = self.data
        if not self.once:
            return d["next_observation"][positions]
        following = d["successor"][positions]
        # a successor is newer than its transition, so it is stored while the transition is
        next_observation = d["observation"][np.maximum(following, 0)]
        for i in np.flatnonzero(following < 0).tolist():
            next_observation[i] = self.final_observations[int(positions[i])]
        return next_observation

    def recent_observations(self, n: int) -> np.ndarray:
        """The newest `n` observations (for calibrating int8 policies)."""
        take = min(n, self.size)
        positions = (self.start + self.size - take + np.arange(take)) % self.capacity
        return self.data["observation"][positions]

    def spread_observations(self, n: int) -> np.ndarray:
        """Up to `n` observations evenly spaced over the whole buffer, oldest to newest (for
        calibrating int8 policies on more than the newest slice)."""
        take = min(n, self.size)
        offsets = np.linspace(0, self.size - 1, take).round().astype(np.int64)
        return self.data["observation"][(self.start + offsets) % self.capacity]

    def oldest(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        positions = self.positions()[:n]
        return (self.data["observation"][positions],
                self.data["deterministic_action"][positions])

    def drop_oldest(self, n: int) -> None:
        """Forget the oldest `n` transitions; the capacity stays. Successor links only point
        forward in time, so no kept transition loses one."""
        n = max(0, min(int(n), self.size))
        for slot in self.positions()[:n].tolist():
            self.final_observations.pop(slot, None)
        self.start = (self.start + n) % self.capacity
        self.size -= n

    # -- checkpoints --------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write the stored transitions (oldest first) and the sampler's state to `path` (.npz)."""
        order = self.positions()
        remap = np.full(self.capacity, -1, np.int64)
        remap[order] = np.arange(self.size)
        arrays = {name: self.data[name][order] for name in _FIELDS if name in self.data}
        successor = arrays["successor"]
        arrays["successor"] = np.where(successor >= 0, remap[np.maximum(successor, 0)], -1)
        tails = [(k[0], k[1], int(remap[p])) for k, p in self._tails.items() if remap[p] >= 0]
        arrays["tails"] = np.asarray(tails, np.int64).reshape(-1, 3)
        if self.once:
            kept = sorted(self.final_observations)
            arrays["final_positions"] = remap[np.asarray(kept, np.int64)]
            arrays["final_observations"] = np.stack(
                [self.final_observations[p] for p in kept]) if kept else np.zeros(
                (0, *self._shapes["observation"][0]), self._shapes["observation"][1])
        arrays["counters"] = np.asarray([self.capacity, self.inserted_total], np.int64)
        arrays["rng_state"] = np.frombuffer(repr(self.rng.bit_generator.state).encode(), np.uint8)
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    def load(self, path: Path) -> None:
        import ast

        with np.load(path) as saved:
            capacity, self.inserted_total = (int(x) for x in saved["counters"])
            n = saved["reward"].shape[0]
            self.capacity = max(capacity, n)
            self.data = self._allocate(self.capacity)
            for name in _FIELDS:
                if name in self.data:
                    self.data[name][:n] = saved[name]
            if self.once:
                self.final_observations = {
                    int(p): o for p, o in zip(saved["final_positions"],
                                              saved["final_observations"], strict=True)}
            self.start, self.size = 0, n
            self._tails = {(int(a), int(e)): int(p) for a, e, p in saved["tails"]}
            self.rng.bit_generator.state = ast.literal_eval(saved["rng_state"].tobytes().decode())
