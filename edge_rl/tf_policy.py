"""The framework baseline: actors that act with TF-Agents' own fp32 policy in TensorFlow.

With `--actor-precision tf-fp32` the learner publishes its agent's greedy policy the way
TF-Agents distributes policies: a SavedModel written once by `PolicySaver.save`, and from then
on only its variables (`PolicySaver.save_checkpoint`), which TF-Agents made to fit the saved
graph. Each broadcast is one zip that stands alone: the metadata, the saved graph and the
newest variables. An actor runs it through `SavedModelPyTFEagerPolicy`, as a TF-Agents user's
collect loop does, and explores on its greedy actions exactly as a LiteRT actor does, so only
the inference (framework, fp32) differs from a `--actor-precision fp32` run.

This module imports TensorFlow: a LiteRT actor never loads it. It registers TFAgentsPolicy
with `edge_rl.device.policy.register_published_format`, and `edge-rl actor` registers a loader
that imports it when such a policy arrives: the device runtime never imports it itself.
"""

from __future__ import annotations

import io
import logging
import shutil
import tempfile
import threading
import zipfile
from hashlib import blake2b
from pathlib import Path
from typing import Any

import numpy as np
from tf_agents.policies import policy_saver, py_tf_eager_policy
from tf_agents.trajectories import time_step as ts

from edge_rl.core import ActorPolicy
from edge_rl.device.errors import PolicyFileError
from edge_rl.device.observations import KINDS as OBSERVATION_KINDS
from edge_rl.device.policy import ZIP_MAGIC, register_published_format
from edge_rl.device.policy_file import PolicyMetadata
from edge_rl.tf_setup import tf

log = logging.getLogger(__name__)

PRECISION = "tf-fp32"  # the --actor-precision that publishes these
METADATA_ENTRY = "edge_rl.policy.json"
VARIABLES_PREFIX = "variables/"  # the SavedModel's variables: what changes between broadcasts
ALGOS = ("dqn", "td3", "d4pg")  # greedy policies their actors explore around


def pack_saved_policy(graph: dict[str, bytes], variables: dict[str, bytes],
                      metadata: PolicyMetadata) -> bytes:
    """One broadcast: metadata + the SavedModel's graph files + its variables, as a zip."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(METADATA_ENTRY, metadata.to_json())
        for name, data in {**graph, **variables}.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file under `root`, by its path relative to `root` (with / separators)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


class SavedPolicyWriter:
    """Learner side: the agent's greedy policy as a broadcast, saved in full once and then
    only its variables (milliseconds)."""

    def __init__(self, agent: Any):
        self._saver = policy_saver.PolicySaver(
            agent.policy, batch_size=None, train_step=agent.train_step_counter
        )
        with tempfile.TemporaryDirectory(prefix="edge-rl-policy-") as folder:
            self._saver.save(folder)
            files = read_tree(Path(folder))
        self.graph = {n: d for n, d in files.items() if not n.startswith(VARIABLES_PREFIX)}

    def write(self, metadata: PolicyMetadata) -> bytes:
        with tempfile.TemporaryDirectory(prefix="edge-rl-policy-") as folder:
            self._saver.save_checkpoint(folder)
            variables = read_tree(Path(folder))
        return pack_saved_policy(self.graph, variables, metadata)


def unpack_saved_policy(data: bytes) -> tuple[PolicyMetadata, dict[str, bytes]]:
    """(metadata, the SavedModel's files) of a broadcast; PolicyFileError if it is not one."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            files = {name: archive.read(name) for name in archive.namelist()}
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise PolicyFileError(f"the TF-Agents policy is not a readable zip: {err}") from None
    if METADATA_ENTRY not in files:
        raise PolicyFileError("the TF-Agents policy has no edge-rl metadata")
    metadata = PolicyMetadata.from_json(files.pop(METADATA_ENTRY))
    for name in files:
        if name.startswith("/") or ".." in Path(name).parts:
            raise PolicyFileError(f"the TF-Agents policy holds a file outside its folder: {name}")
    return metadata, files


class _LoadedModel:
    """One SavedModel loaded in this process, shared by the policies of one run: a newer
    broadcast only reads its variables into it."""

    def __init__(self, graph: dict[str, bytes], variables: dict[str, bytes], version: int):
        try:  # one thread, as a LiteRT policy uses; fails once TF's runtime has started
            tf.config.threading.set_intra_op_parallelism_threads(1)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:
            pass
        self.digest = graph_digest(graph)
        self._folder = tempfile.TemporaryDirectory(prefix="edge-rl-tf-policy-")
        root = Path(self._folder.name)
        _write_tree(root / "model", {**graph, **variables})
        # Loading runs the policy once on zeros: a model that cannot run fails here.
        self.policy = py_tf_eager_policy.SavedModelPyTFEagerPolicy(
            str(root / "model"), load_specs_from_pbtxt=True, use_tf_function=True,
            batch_time_steps=False,
        )
        self.version = version  # the policy version whose variables are loaded
        self._serial = 0
        self.lock = threading.Lock()

    def load_variables(self, variables: dict[str, bytes], version: int) -> None:
        self._serial += 1
        folder = Path(self._folder.name) / f"update-{self._serial}"
        _write_tree(folder, variables)
        self.policy.update_from_checkpoint(str(folder))  # read now, not lazily
        shutil.rmtree(folder, ignore_errors=True)
        self.version = version


def graph_digest(graph: dict[str, bytes]) -> str:
    hasher = blake2b(digest_size=16)
    for name in sorted(graph):
        hasher.update(name.encode() + b"\0" + graph[name])
    return hasher.hexdigest()


def _write_tree(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


class TFAgentsPolicy(ActorPolicy):
    """A published TF-Agents policy with the device Policy's interface (`outputs`, `greedy`,
    `act`, `metadata`, `version`).

    Its outputs are already the greedy actions: the explorer adds its noise to them (TD3) or
    replaces some of them (DQN's epsilon), as it does to a LiteRT policy's greedy actions.
    Constructed in the actor's policy-pulling thread; the new variables are read into the
    shared model on the acting thread, at this policy's first use, so acting never sees
    half-written weights.
    """

    output_quantization = (0.0, 0)
    output_step = 0.0

    def __init__(self, data: bytes, previous: Any = None):
        self.metadata, files = unpack_saved_policy(data)
        if self.metadata.algo not in ALGOS:
            raise PolicyFileError(f"the TF-Agents baseline covers {', '.join(ALGOS)}, "
                                  f"not {self.metadata.algo}")
        self.model = bytes(data)
        graph = {n: d for n, d in files.items() if not n.startswith(VARIABLES_PREFIX)}
        self._variables = {n: d for n, d in files.items() if n.startswith(VARIABLES_PREFIX)}
        shared = getattr(previous, "loaded", None)
        if shared is None or shared.digest != graph_digest(graph):
            try:
                shared = _LoadedModel(graph, self._variables, self.version)
            except (ValueError, OSError, RuntimeError) as err:
                raise PolicyFileError(f"TensorFlow cannot load this policy: {err}") from None
        self.loaded = shared
        self.runtime = f"tf-agents SavedModelPyTFEagerPolicy (tensorflow {tf.__version__})"

    @property
    def version(self) -> int:
        return self.metadata.policy_version

    def outputs(self, observations: np.ndarray) -> np.ndarray:
        """The greedy actions for a batch of observations."""
        loaded = self.loaded
        with loaded.lock:
            if loaded.version != self.version:
                loaded.load_variables(self._variables, self.version)
            n = observations.shape[0]
            # The greedy policies are stateless: the step type does not change the action.
            step = ts.TimeStep(
                step_type=np.ones(n, np.int32), reward=np.zeros(n, np.float32),
                discount=np.ones(n, np.float32),
                observation=OBSERVATION_KINDS[self.metadata.observation].as_stored(observations),
            )
            action = loaded.policy.action(step).action.numpy()
        if self.metadata.discrete:
            return action.astype(np.int64, copy=False)
        return action.astype(np.float32, copy=False)

    def greedy(self, outputs: np.ndarray) -> np.ndarray:
        return outputs


register_published_format(ZIP_MAGIC, TFAgentsPolicy)
