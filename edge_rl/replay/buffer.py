"""Replay: a ring of transitions in arrival order, with n-step returns built at sample time.

Each transition remembers where the next transition of the same actor episode landed
(`successor`), so n-step returns can be assembled for any sampled transition even when many
actors' batches interleave. A successor is trusted only if the slot still holds the same
(actor, episode, step + 1): ring overwrites and resizes can never splice two episodes.

With n steps and discount gamma, a sample's reward is sum_k gamma^k r_k over the k <= n steps
that exist, and its discount is gamma^(k-1) (0 if the last step terminated), so that a
TF-Agents agent, which bootstraps with gamma * discount * Q(next), uses gamma^k. Rewards stop
at episode ends; truncation bootstraps, termination does not. A lost life (`life_lost`, Atari's
episodic life) ends the targets as a termination does, but not the episode: its links stay, so
the frames after it are still stored once.

With `once` (image observations: edge_rl.device.observations), each observation is stored
once: a transition's next observation is its successor's observation, and only transitions
without a successor (an episode's last, or the newest of an episode still running) keep theirs,
in `final_observations`, until a successor arrives. Frames then cost one copy per transition
plus one per episode, not two per transition.

With a `stack` of S frames on the observation's last axis (Atari's 4), each step adds one
frame: only that frame (the observation's newest channels) is stored, and an observation is
rebuilt from its transition's frame and those of its episode's S - 1 previous transitions
(`predecessor` links), an episode's first frame repeated before its start, as frame stacks
begin. A transition whose observation that rebuild would not give (an env padding its first
stack otherwise, an earlier step that never arrived) keeps its whole stack in `stacks`. One
whose earlier frames the ring has since overwritten is not sampled.

One module past ~400 lines, on purpose: saving and loading (the last part) rewrite the ring's
successor and predecessor links for the order they store, so they read its private state as
much as insert and sample do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edge_rl.core import ReplayBuffer
from edge_rl.device.observations import VECTOR
from edge_rl.device.wire import Transitions

_FIELDS = (
    "observation", "next_observation", "action", "deterministic_action", "reward",
    "terminated", "truncated", "life_lost", "actor_key", "episode_id", "episode_step",
    "successor", "predecessor",
)
MAX_REDRAWS = 100  # rounds of redrawing samples whose frames the ring overwrote


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
        stack: int = 1,  # frames per observation on its last axis, each step adding one
        reward_clip: float = 0.0,  # each reward clipped to [-c, c] in samples; 0: as given
    ):
        self.capacity = int(capacity)
        self.reward_clip = float(reward_clip)
        self.once = once
        self.stack = int(stack)
        self.observation_shape = tuple(observation_shape)
        if self.stack > 1 and not (once and observation_shape[-1] % self.stack == 0):
            raise ValueError(f"a stack of {stack} frames needs `once` and an observation whose "
                             f"last axis divides by it, not {list(observation_shape)}")
        # what one transition stores of its observation: all of it, or its newest frame
        self.frame_channels = observation_shape[-1] // self.stack if self.stack > 1 else None
        stored_shape = (tuple(observation_shape) if self.frame_channels is None
                        else (*observation_shape[:-1], self.frame_channels))
        self.gamma = float(gamma)
        self.nstep = int(nstep)
        self.rng = np.random.default_rng(seed)
        self._shapes = {
            "observation": (stored_shape, np.dtype(observation_dtype)),
            "next_observation": (tuple(observation_shape), np.dtype(observation_dtype)),
            "action": (tuple(action_shape), np.dtype(action_dtype)),
            "deterministic_action": (tuple(action_shape), np.dtype(action_dtype)),
            "reward": ((), np.float32),
            "terminated": ((), np.bool_),
            "truncated": ((), np.bool_),
            "life_lost": ((), np.bool_),
            "actor_key": ((), np.int64),
            "episode_id": ((), np.int64),
            "episode_step": ((), np.int64),
            "successor": ((), np.int64),
        }
        if once:
            del self._shapes["next_observation"]
        if self.stack > 1:
            self._shapes["predecessor"] = ((), np.int64)
        # position -> next observation, for stored transitions without a successor (`once`)
        self.final_observations: dict[int, np.ndarray] = {}
        # position -> whole observation, where rebuilding it from frames would not give it
        self.stacks: dict[int, np.ndarray] = {}
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
        if "predecessor" in data:
            data["predecessor"][:] = -1
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
                                    "life_lost", "episode_id", "episode_step") if name in d]
        for ring, batch in slices:
            for name in stored:
                values = getattr(transitions, name)[batch]
                if name == "observation" and self.frame_channels is not None:
                    values = values[..., -self.frame_channels:]  # the newest frame only
                d[name][ring] = values
            if "predecessor" in d:
                d["predecessor"][ring] = -1
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
                if "predecessor" in d:
                    d["predecessor"][position[first]] = previous
                self.final_observations.pop(previous, None)  # its successor holds it now
            if not closes[final]:
                self._tails[key] = int(position[final])
        # Within the batch: link each transition to the next one of its episode unless it
        # ended the episode or a step is missing between them.
        link = (episode[1:] == episode[:-1]) & ~closes[:-1] & (step[1:] == step[:-1] + 1)
        d["successor"][position[:-1][link]] = position[1:][link]
        if "predecessor" in d:
            d["predecessor"][position[1:][link]] = position[:-1][link]
        if self.once:
            # overwritten slots lose their kept observations; the batch's transitions without
            # a successor keep theirs
            for slot in positions.tolist():
                self.final_observations.pop(slot, None)
                self.stacks.pop(slot, None)
            unlinked = np.concatenate((~link, [True]))  # in episode-sorted order
            for row, slot in zip(order[unlinked].tolist(), position[unlinked].tolist(),
                                 strict=True):
                self.final_observations[slot] = transitions.next_observation[row].copy()
        if self.stack > 1:  # keep whole any observation the frames would not rebuild
            rebuilt, exact = self.observations(positions)
            same = (rebuilt == transitions.observation).reshape(n, -1).all(axis=1)
            for row in np.flatnonzero(~(same & exact)).tolist():
                self.stacks[int(positions[row])] = transitions.observation[row].copy()

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

    def _draw(self, n: int) -> np.ndarray:
        return (self.start + self.rng.integers(0, self.size, size=n)) % self.capacity

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        return self._sample_with_index(batch_size)[0]

    def _sample_with_index(self, batch_size: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """A minibatch drawn by `_draw`, and the positions it came from."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay")
        index = self._draw(batch_size)
        batch, exact = self._sample_at(index)
        for _ in range(MAX_REDRAWS):  # only stacked frames can be inexact
            if exact.all():
                return batch, index
            index[~exact] = self._draw(int((~exact).sum()))
            batch, exact = self._sample_at(index)
        raise ValueError("the replay holds too few transitions whose frames are all stored")

    def _sample_at(self, index: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The samples at `index`, and which of them have every frame of their observation and
        next observation still stored."""
        d = self.data
        batch_size = len(index)
        reward = self._clipped(d["reward"][index])
        steps = np.ones(batch_size, np.int64)
        last = index.copy()
        alive = ~self._stops(index)
        for k in range(1, self.nstep):
            following = d["successor"][last]
            ok = alive & (following >= 0)
            following = np.where(ok, following, 0)
            ok &= (
                (d["actor_key"][following] == d["actor_key"][last])
                & (d["episode_id"][following] == d["episode_id"][last])
                & (d["episode_step"][following] == d["episode_step"][last] + 1)
            )
            reward += np.where(ok, self.gamma**k * self._clipped(d["reward"][following]), 0.0)
            last = np.where(ok, following, last)
            steps += ok
            alive = ok & ~self._stops(last)
        discount = np.where(self._no_bootstrap(last), 0.0, self.gamma ** (steps - 1))
        observation, exact = self.observations(index)
        next_observation, next_exact = self.next_observations(last)
        return {
            "observation": observation,
            "action": d["action"][index],
            "reward": reward.astype(np.float32),
            "discount": discount.astype(np.float32),
            "next_observation": next_observation,
        }, exact & next_exact

    def _no_bootstrap(self, positions: np.ndarray) -> np.ndarray:
        """Whether a target ending at each transition adds no value after it (discount 0): a
        termination or a lost life."""
        return self.data["terminated"][positions] | self.data["life_lost"][positions]

    def _stops(self, positions: np.ndarray) -> np.ndarray:
        """Whether the n-step sum stops after each transition: as above, or a truncation
        (which bootstraps)."""
        return self._no_bootstrap(positions) | self.data["truncated"][positions]

    def _clipped(self, rewards: np.ndarray) -> np.ndarray:
        rewards = rewards.astype(np.float64)
        if self.reward_clip > 0:
            return np.clip(rewards, -self.reward_clip, self.reward_clip)
        return rewards

    def observations(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The observation of the transition at each of `positions`, and whether it is exact
        (false where a stack's earlier frame was overwritten)."""
        d = self.data
        if self.stack == 1:
            return d["observation"][positions], np.ones(len(positions), bool)
        frames = [d["observation"][positions]]
        exact = np.ones(len(positions), bool)
        current = positions
        for _ in range(self.stack - 1):
            previous = d["predecessor"][current]
            held = np.maximum(previous, 0)
            found = ((previous >= 0) & (d["actor_key"][held] == d["actor_key"][current])
                     & (d["episode_id"][held] == d["episode_id"][current])
                     & (d["episode_step"][held] == d["episode_step"][current] - 1))
            # before an episode's first step its first frame repeats; elsewhere a missing
            # earlier step leaves the stack unknown
            exact &= found | (d["episode_step"][current] == 0)
            current = np.where(found, previous, current)
            frames.insert(0, d["observation"][current])
        observation = np.concatenate(frames, axis=-1)
        if self.stacks:
            for i, position in enumerate(positions.tolist()):
                kept = self.stacks.get(position)
                if kept is not None:
                    observation[i], exact[i] = kept, True
        return observation, exact

    def next_observations(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The next observation of the transition at each of `positions`, and whether it is
        exact (see `observations`)."""
        d = self.data
        if not self.once:
            return d["next_observation"][positions], np.ones(len(positions), bool)
        following = d["successor"][positions]
        # a successor is newer than its transition, so it is stored while the transition is
        next_observation, exact = self.observations(np.maximum(following, 0))
        for i in np.flatnonzero(following < 0).tolist():
            next_observation[i] = self.final_observations[int(positions[i])]
            exact[i] = True
        return next_observation, exact

    def _exact_observations(self, positions: np.ndarray) -> np.ndarray:
        observation, exact = self.observations(positions)
        return observation[exact]

    def recent_observations(self, n: int) -> np.ndarray:
        """The newest `n` observations (for calibrating int8 policies)."""
        take = min(n, self.size)
        positions = (self.start + self.size - take + np.arange(take)) % self.capacity
        return self._exact_observations(positions)

    def spread_observations(self, n: int) -> np.ndarray:
        """Up to `n` observations evenly spaced over the whole buffer, oldest to newest (for
        calibrating int8 policies on more than the newest slice)."""
        take = min(n, self.size)
        offsets = np.linspace(0, self.size - 1, take).round().astype(np.int64)
        return self._exact_observations((self.start + offsets) % self.capacity)

    def oldest(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        positions = self.positions()[:n]
        observation, exact = self.observations(positions)
        return observation[exact], self.data["deterministic_action"][positions][exact]

    def drop_oldest(self, n: int) -> None:
        """Forget the oldest `n` transitions; the capacity stays. Successor links only point
        forward in time, so no kept transition loses one."""
        n = max(0, min(int(n), self.size))
        for slot in self.positions()[:n].tolist():
            self.final_observations.pop(slot, None)
            self.stacks.pop(slot, None)
        self.start = (self.start + n) % self.capacity
        self.size -= n

    # -- checkpoints --------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write the stored transitions (oldest first) and the sampler's state to `path` (.npz)."""
        order = self.positions()
        remap = np.full(self.capacity, -1, np.int64)
        remap[order] = np.arange(self.size)
        arrays = {name: self.data[name][order] for name in _FIELDS if name in self.data}
        for link in ("successor", "predecessor"):
            if link in arrays:
                arrays[link] = np.where(arrays[link] >= 0, remap[np.maximum(arrays[link], 0)], -1)
        tails = [(k[0], k[1], int(remap[p])) for k, p in self._tails.items() if remap[p] >= 0]
        arrays["tails"] = np.asarray(tails, np.int64).reshape(-1, 3)
        stacks = dict(self.stacks)
        if self.stack > 1:  # stacks whose earlier frames the saved window leaves out go whole
            reaching = order[self._reaches_before(order, remap)]  # a few, not the whole ring
            observation, exact = self.observations(reaching)
            for position, kept in zip(reaching[exact].tolist(), observation[exact], strict=True):
                stacks.setdefault(position, kept)
        if self.once:
            for name, kept in (("final", self.final_observations), ("stacks", stacks)):
                arrays[f"{name}_positions"], arrays[f"{name}_observations"] = self._packed(
                    kept, remap)
        arrays.update(self._saved_extras(order))
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
                if name in self.data and name in saved:  # life_lost: not in older saves
                    self.data[name][:n] = saved[name]
            if self.once:
                self.final_observations = self._unpacked(saved, "final")
                self.stacks = self._unpacked(saved, "stacks")
            self.start, self.size = 0, n
            self._tails = {(int(a), int(e)): int(p) for a, e, p in saved["tails"]}
            self.rng.bit_generator.state = ast.literal_eval(saved["rng_state"].tobytes().decode())
            self._load_extras(saved, n)

    def _saved_extras(self, order: np.ndarray) -> dict[str, np.ndarray]:
        """What a subclass saves beside the transitions (`order`: their positions, oldest
        first)."""
        return {}

    def _load_extras(self, saved: Any, n: int) -> None:
        """Read back `_saved_extras` for the `n` transitions now at positions 0..n-1."""

    def _reaches_before(self, positions: np.ndarray, remap: np.ndarray) -> np.ndarray:
        """Whether each transition's stack takes a frame from a transition `remap` leaves out
        (-1): one before the stored window."""
        d = self.data
        reaches = np.zeros(len(positions), bool)
        current = positions
        for _ in range(self.stack - 1):
            previous = d["predecessor"][current]
            linked = previous >= 0
            reaches |= linked & (remap[np.maximum(previous, 0)] < 0)
            current = np.where(linked, previous, current)
        return reaches

    def _packed(self, kept: dict[int, np.ndarray], remap: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """(saved positions, observations) of a position -> observation dict."""
        positions = sorted(p for p in kept if remap[p] >= 0)
        observations = np.zeros((len(positions), *self.observation_shape),
                                self._shapes["observation"][1])
        for i, position in enumerate(positions):
            observations[i] = kept[position]
        return remap[np.asarray(positions, np.int64)], observations

    @staticmethod
    def _unpacked(saved: Any, name: str) -> dict[int, np.ndarray]:
        if f"{name}_positions" not in saved:  # saved before stacks were kept
            return {}
        return {int(p): o for p, o in zip(saved[f"{name}_positions"],
                                          saved[f"{name}_observations"], strict=True)}
