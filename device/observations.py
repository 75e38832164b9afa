"""Observation kinds: what edge-rl does with an env's observations, decided in one place.

An `ObservationKind` says, for the observation spaces it accepts, the shape and dtype that
rollouts batch, the wire carries, the replay stores and the policy network takes as input, and
how raw observations become that dtype. An env's observations are described by an
`ObservationSpec` (kind and shape, from `describe_observations`); the env description,
rollouts, the wire, the replay, the network builders (edge_rl.agents.parts), the converter and
the device's policy input ask it instead of assuming float vectors. A policy file names its
observations' kind (PolicyMetadata.observation), so a device feeds it what it was built for.

Three kinds exist:

- `vector`: any Box of numbers of rank 1 (plus the Control Suite's dict observations,
  flattened by edge_rl.device.envs), stored and fed as float32;
- `frames`: a uint8 Box of rank 2 or 3 (height, width[, channels]), camera or Atari frames,
  stored, sent and fed as uint8 in [0, 255];
- `planes`: a bool Box of rank 3 (height, width, channels), one on/off plane per object kind
  as MinAtar gives, stored, sent and fed as uint8 0/1.

Frames and planes are bounded by construction (`value_max`): a network scales its input by
1 / value_max itself, and an int8 policy file maps [0, value_max] onto its int8 grid exactly,
so a board hands the interpreter the env's raw bytes. Anything no kind accepts is refused with
one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_rl.device.errors import UserError


@dataclass(frozen=True)
class ObservationKind:
    """How observations of one kind are shaped, stored and fed."""

    name: str
    stored_dtype: str  # in rollouts, on the wire, in replay and at the policy network's input
    # The largest value an observation of this kind can hold where that is fixed by the kind
    # (255 for frames); None where it is not (vectors: their ranges are calibrated on data).
    value_max: float | None = None
    # Whether each observation is sent and stored once: a step's next observation is the
    # following step's observation, so for kilobyte frames batches and replay keep one copy.
    # Vectors keep both (a few floats; old learners read them).
    once: bool = False

    def accepts(self, space: Any) -> bool:
        """Whether this kind handles observations from `space` (a gymnasium space)."""
        import gymnasium as gym

        return (isinstance(space, gym.spaces.Box) and len(space.shape) == 1
                and np.issubdtype(space.dtype, np.number))

    def shape(self, space: Any) -> tuple[int, ...]:
        """One observation's shape as stored."""
        return tuple(int(d) for d in space.shape)

    def as_stored(self, observations: Any) -> np.ndarray:
        """Raw observations (one or a batch) in the stored dtype."""
        return np.asarray(observations, dtype=self.stored_dtype)


@dataclass(frozen=True)
class ObservationSpec:
    """An env's observations: their kind and one observation's shape as stored."""

    kind: ObservationKind
    shape: tuple[int, ...]
    # Frames per observation, stacked on its last axis with each step adding one (Atari's 4,
    # as edge_rl.device.atari stacks them): the replay then stores each frame once.
    stack: int = 1

    @property
    def dtype(self) -> str:
        return self.kind.stored_dtype

    @property
    def is_image(self) -> bool:
        """Whether observations are pictures (rank 2 or 3), for convolutional networks."""
        return len(self.shape) >= 2

    @property
    def size(self) -> int:
        """Numbers in one observation."""
        return int(np.prod(self.shape, dtype=np.int64))


KINDS: dict[str, ObservationKind] = {}


def register_observation_kind(kind: ObservationKind) -> ObservationKind:
    """Make `kind` known to env descriptions, policy files and the device runtime (a kind
    whose `accepts` overlaps an earlier one's comes second to it)."""
    KINDS[kind.name] = kind
    return kind


class Frames(ObservationKind):
    """uint8 frames, rank 2 (grayscale) or 3 (height, width, channels)."""

    def accepts(self, space: Any) -> bool:
        import gymnasium as gym

        return (isinstance(space, gym.spaces.Box) and space.dtype == np.uint8
                and len(space.shape) in (2, 3))


class Planes(ObservationKind):
    """bool planes (height, width, channels), stored as uint8 0/1."""

    def accepts(self, space: Any) -> bool:
        import gymnasium as gym

        return (isinstance(space, gym.spaces.Box) and space.dtype == np.bool_
                and len(space.shape) == 3)


VECTOR = register_observation_kind(ObservationKind("vector", "float32"))
FRAMES = register_observation_kind(Frames("frames", "uint8", value_max=255.0, once=True))
PLANES = register_observation_kind(Planes("planes", "uint8", value_max=1.0, once=True))


def vector(shape: tuple[int, ...]) -> ObservationSpec:
    """Float vector observations of this shape (what every env edge-rl runs today gives)."""
    return ObservationSpec(VECTOR, tuple(int(d) for d in shape))


def describe_observations(space: Any) -> ObservationSpec:
    """The kind and stored shape of observations from `space`; a one-line UserError where no
    kind handles it."""
    kind = observation_kind(space)
    return ObservationSpec(kind, kind.shape(space))


def observation_kind(space: Any) -> ObservationKind:
    """The kind that handles `space`; a one-line UserError where none does."""
    for kind in KINDS.values():
        if kind.accepts(space):
            return kind
    raise UserError(f"observation space {space} is not supported (edge-rl takes a 1-D Box of "
                    "numbers, uint8 frames of rank 2 or 3, or bool planes of rank 3)")
