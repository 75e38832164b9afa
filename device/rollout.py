"""Stepping several copies of an env together and cutting what happens into batches.

An actor's loop is: one batched inference for all its env copies, exploration, one step of
each copy, and the transitions of that step written into the batch being built, all rows at
once. At ~30 µs per MuJoCo step, every microsecond of per-step Python shows in steps/s, so
per-step work is kept to the env call itself; the rest is done once per step of all copies.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from edge_rl.device.envs import LIFE_LOST, frame_stack, make_env
from edge_rl.device.observations import VECTOR, observation_kind
from edge_rl.device.wire import Transitions

_FIELDS = tuple(f.name for f in fields(Transitions))


class BatchBuilder:
    """Preallocated arrays filled with rows of transitions; hands out each batch when full."""

    def __init__(self, size: int, obs_shape: tuple[int, ...], action_example: np.ndarray,
                 obs_dtype: str = VECTOR.stored_dtype):
        self.size = size
        action = np.asarray(action_example)
        shapes = {
            "observation": ((*obs_shape,), np.dtype(obs_dtype)),
            "next_observation": ((*obs_shape,), np.dtype(obs_dtype)),
            "action": (action.shape, action.dtype),
            "deterministic_action": (action.shape, action.dtype),
            "reward": ((), np.float32),
            "terminated": ((), np.bool_),
            "truncated": ((), np.bool_),
            "life_lost": ((), np.bool_),
            "episode_id": ((), np.int64),
            "episode_step": ((), np.int64),
        }
        self.arrays = {name: np.zeros((size, *shape), dtype)
                       for name, (shape, dtype) in shapes.items()}
        self.count = 0

    def add(self, rows: dict[str, np.ndarray]) -> list[Transitions]:
        """Append `rows` (one array per Transitions field, same length); the batches filled."""
        n = len(rows["reward"])
        full, start = [], 0
        while start < n:
            k = min(n - start, self.size - self.count)
            for name, array in self.arrays.items():
                array[self.count:self.count + k] = rows[name][start:start + k]
            self.count += k
            start += k
            if self.count == self.size:
                full.append(self.take())
        return full

    def take(self) -> Transitions:
        """The rows so far, as a batch (copied); the builder starts empty again."""
        n, self.count = self.count, 0
        return Transitions(**{name: self.arrays[name][:n].copy() for name in _FIELDS})


class Rollout:
    """`num_envs` copies of an env, stepped together with one action each per step."""

    def __init__(self, env_id: str, num_envs: int, seed: int, batch_size: int,
                 action_example: np.ndarray):
        self.envs = [make_env(env_id) for _ in range(num_envs)]
        self.kind = observation_kind(self.envs[0].observation_space)
        self.stack = frame_stack(self.envs[0])  # frames stacked on its observations' last axis
        first = [env.reset(seed=seed * 1000 + i)[0] for i, env in enumerate(self.envs)]
        for i, env in enumerate(self.envs):
            env.action_space.seed(seed * 1000 + i)
        self.obs = self.kind.as_stored(np.stack(first))
        self._next_obs = np.zeros_like(self.obs)
        self._reward = np.zeros(num_envs, np.float32)
        self._terminated = np.zeros(num_envs, bool)
        self._truncated = np.zeros(num_envs, bool)
        self._life_lost = np.zeros(num_envs, bool)
        self.episode_ids = np.arange(num_envs, dtype=np.int64)
        self._next_episode_id = num_envs
        self.episode_steps = np.zeros(num_envs, np.int64)
        self.episode_returns = np.zeros(num_envs, np.float64)
        self.finished_returns: list[float] = []  # returns of episodes ended since last taken
        self.env_steps = 0
        self.builder = BatchBuilder(batch_size, self.obs.shape[1:], action_example,
                                    self.kind.stored_dtype)

    def step(self, actions: np.ndarray, deterministic_actions: np.ndarray) -> list[Transitions]:
        """Step every copy with its action; returns the batches this step completed."""
        next_obs, reward = self._next_obs, self._reward
        terminated, truncated, life_lost = self._terminated, self._truncated, self._life_lost
        for i, env in enumerate(self.envs):
            next_obs[i], reward[i], terminated[i], truncated[i], info = env.step(actions[i])
            life_lost[i] = bool(info.get(LIFE_LOST, False))
        self.env_steps += len(self.envs)
        batches = self.builder.add({
            "observation": self.obs,
            "action": actions,
            "deterministic_action": deterministic_actions,
            "reward": reward,
            "next_observation": next_obs,
            "terminated": terminated,
            "truncated": truncated,
            # a life lost ends what the learner bootstraps through, not the episode (the env
            # goes on, its frames too, and the episode's return counts every life)
            "life_lost": life_lost,
            "episode_id": self.episode_ids,
            "episode_step": self.episode_steps,
        })
        self.episode_returns += reward
        self.episode_steps += 1
        for i in np.flatnonzero(terminated | truncated):
            self.finished_returns.append(float(self.episode_returns[i]))
            self.episode_returns[i] = 0.0
            self.episode_steps[i] = 0
            self.episode_ids[i] = self._next_episode_id
            self._next_episode_id += 1
            next_obs[i] = self.envs[i].reset()[0]
        # The next observations become the current ones; the old array is written next step
        # (the builder has copied its rows already).
        self.obs, self._next_obs = next_obs, self.obs
        return batches

    def take_returns(self) -> list[float]:
        returns, self.finished_returns = self.finished_returns, []
        return returns

    def close(self) -> None:
        for env in self.envs:
            env.close()
