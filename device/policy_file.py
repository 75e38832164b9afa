"""Policy metadata: what a device needs to run a policy file, stored inside the file.

The metadata is a JSON document in the .tflite model's `metadata` table under the name
`METADATA_NAME`: env id, observation and action specs, action bounds, algorithm, precision,
what the network outputs, policy version and training step. Format 2 adds `input_scale`: an
int8 network whose first layer was built for observations divided feature by feature by these
numbers (so that every feature spans the int8 input grid, not just the widest one); a runtime
that reads only format 1 refuses such a file rather than feed it raw observations.

A sparse network's policy travels and is stored xz-compressed (`pack_policy`): its int8 zeros
compress well, and the stdlib's lzma is on every board. Everything that reads a policy file
accepts either form (`unpack_policy`).
"""

from __future__ import annotations

import json
import lzma
from dataclasses import asdict, dataclass, field
from typing import Any

from edge_rl.device.errors import PolicyFileError
from edge_rl.device.observations import KINDS as OBSERVATION_KINDS
from edge_rl.device.observations import VECTOR
from edge_rl.device.outputs import OUTPUT_KINDS
from edge_rl.device.tflite_file import (
    output_quantization,
    output_step,
    read_metadata_entries,
    verify_model,
)

__all__ = [
    "METADATA_NAME", "OUTPUT_KINDS", "PolicyFileError", "PolicyMetadata",
    "output_quantization", "output_step", "pack_policy", "read_metadata_entries",
    "read_policy_metadata", "unpack_policy", "verify_model",
]

METADATA_NAME = "edge_rl.policy"
METADATA_FORMAT = 1  # a file without input scales (what runtimes before format 2 read)
SCALED_INPUT_FORMAT = 2  # a file with input scales

XZ_MAGIC = b"\xfd7zXZ\x00"
MAX_POLICY_BYTES = 256 << 20  # a policy that unpacks to more than this is refused



@dataclass(frozen=True)
class PolicyMetadata:
    """Everything needed to run a policy file, stored inside it."""

    env_id: str
    algo: str
    precision: str
    output: str  # what the outputs mean: a kind of edge_rl.device.outputs.OUTPUT_KINDS
    observation_shape: tuple[int, ...]
    action: dict[str, Any]  # {"kind": "discrete", "n": N} or {"kind": "continuous", ...}
    policy_version: int = 0
    train_step: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    # The network takes observation / input_scale (flattened, one number a feature); None: as is
    input_scale: tuple[float, ...] | None = None
    # the observations' kind (edge_rl.device.observations): what dtype the network's input is
    observation: str = VECTOR.name

    @property
    def discrete(self) -> bool:
        return self.action["kind"] == "discrete"

    @property
    def format(self) -> int:
        return METADATA_FORMAT if self.input_scale is None else SCALED_INPUT_FORMAT

    def to_json(self) -> bytes:
        doc = asdict(self)
        doc["observation_shape"] = list(self.observation_shape)
        doc["format"] = self.format
        if self.input_scale is None:
            del doc["input_scale"]  # a format 1 document, as older runtimes read it
        else:
            doc["input_scale"] = list(self.input_scale)
        if self.observation == VECTOR.name:
            del doc["observation"]  # implied, as runtimes that know only vectors read it
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> PolicyMetadata:
        doc = json.loads(data.decode())
        version = doc.pop("format", None)
        if version not in (METADATA_FORMAT, SCALED_INPUT_FORMAT):
            raise PolicyFileError(
                f"policy metadata format {version} is not supported (this runtime reads formats "
                f"{METADATA_FORMAT} and {SCALED_INPUT_FORMAT})"
            )
        doc["observation_shape"] = tuple(doc["observation_shape"])
        if doc.get("output") not in OUTPUT_KINDS:
            raise PolicyFileError(f"policy metadata names an unknown output {doc.get('output')!r}")
        if doc.get("observation", VECTOR.name) not in OBSERVATION_KINDS:
            raise PolicyFileError(f"policy metadata names observations of an unknown kind "
                                  f"{doc.get('observation')!r} (this runtime knows "
                                  f"{', '.join(OBSERVATION_KINDS)})")
        _check_action(doc.get("action"))
        if version == SCALED_INPUT_FORMAT:
            doc["input_scale"] = _checked_input_scale(doc.get("input_scale"),
                                                      doc["observation_shape"])
        elif "input_scale" in doc:
            raise PolicyFileError("format 1 policy metadata cannot carry input scales")
        return cls(**doc)


def _check_action(action: Any) -> None:
    """The action spec must say what the device needs to act: n, or low and high."""
    kind = action.get("kind") if isinstance(action, dict) else None
    if kind == "discrete":
        n = action.get("n")
        if not isinstance(n, int) or n < 1:
            raise PolicyFileError(f"policy metadata gives a bad number of actions {n!r}")
    elif kind == "continuous":
        low, high = action.get("low"), action.get("high")
        if not isinstance(low, list) or not isinstance(high, list) or len(low) != len(high):
            raise PolicyFileError("policy metadata gives bad action bounds")
    else:
        raise PolicyFileError(f"policy metadata names an unknown action kind {kind!r}")


def _checked_input_scale(scale: Any, observation_shape: tuple[int, ...]) -> tuple[float, ...]:
    """Input scales must be positive finite numbers, one for each observation feature."""
    features = 1
    for d in observation_shape:
        features *= int(d)
    if not isinstance(scale, list) or len(scale) != features or not all(
        isinstance(s, int | float) and 0 < s < float("inf") for s in scale
    ):
        raise PolicyFileError(f"policy metadata needs {features} positive input scales")
    return tuple(float(s) for s in scale)


def pack_policy(model: bytes, preset: int = 6) -> bytes:
    """The policy file xz-compressed (what sparse policies are sent and stored as)."""
    return lzma.compress(model, format=lzma.FORMAT_XZ, preset=preset)


def unpack_policy(data: bytes) -> bytes:
    """The .tflite bytes of a policy file, compressed (`pack_policy`) or not."""
    data = bytes(data)
    if not data.startswith(XZ_MAGIC):
        return data
    unpacker = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    try:
        model = unpacker.decompress(data, max_length=MAX_POLICY_BYTES)
    except lzma.LZMAError as err:
        raise PolicyFileError(f"the compressed policy file is corrupt: {err}") from None
    if not unpacker.eof:
        raise PolicyFileError("the compressed policy file is truncated or too large")
    return model


def read_policy_metadata(model: bytes) -> PolicyMetadata:
    """The edge-rl metadata of a policy file; a clear error when it has none."""
    entries = read_metadata_entries(unpack_policy(model))
    if METADATA_NAME not in entries:
        raise PolicyFileError(
            "this .tflite file has no edge-rl policy metadata (export it with `edge-rl export`)"
        )
    try:
        return PolicyMetadata.from_json(entries[METADATA_NAME])
    except (ValueError, KeyError, TypeError) as err:
        raise PolicyFileError(f"the policy metadata is unreadable: {err}") from None
