import hashlib
import re
from pathlib import Path

import google.protobuf
import numpy as np
import pytest

from edge_rl.device import wire_pb2, wire_pb2_grpc  # noqa: F401  (stubs import)
from edge_rl.device.wire import (
    POLICY_CHUNK_BYTES,
    PROTOCOL_VERSION,
    BatchError,
    Transitions,
    assemble_policy,
    decode_batch,
    encode_batch,
    policy_chunks,
    to_tensor,
    validate_batch,
)

ROOT = Path(__file__).resolve().parents[1]

CARTPOLE = ((4,), {"kind": "discrete", "n": 2})
PENDULUM = ((3,), {"kind": "continuous", "shape": [1], "low": [-2.0], "high": [2.0]})


def transitions(n=5, obs_dim=4, action=None):
    rng = np.random.default_rng(0)
    if action is None:
        action = rng.integers(0, 2, n)
    return Transitions(
        observation=rng.normal(size=(n, obs_dim)).astype(np.float32),
        action=action,
        deterministic_action=action.copy(),
        reward=np.ones(n, np.float32),
        next_observation=rng.normal(size=(n, obs_dim)).astype(np.float32),
        terminated=np.eye(1, n, n - 1, dtype=bool)[0],
        truncated=np.zeros(n, bool),
        episode_id=np.zeros(n, np.int64),
        episode_step=np.arange(n, dtype=np.int64),
    )


def encode(t, **kw):
    args = dict(run_id="r", actor_id="a", incarnation=1, seq=3, policy_version=2)
    args.update(kw)
    return encode_batch(t, **args)


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3])


def test_the_stubs_need_no_newer_protobuf_than_the_install_allows():
    # Generated code needs a protobuf runtime at least as new as the generator's. The stubs
    # are generated with the oldest protobuf pyproject.toml allows (TF 2.15 pins < 5), so every
    # install that pip resolves can import them; the wheel test imports them under the newest.
    generated = re.search(r"Protobuf Python Version: ([\d.]+)", open(wire_pb2.__file__).read())
    lowest = re.search(r'"protobuf>=([\d.]+)', (ROOT / "pyproject.toml").read_text())
    assert generated and lowest
    assert version(generated[1])[:2] <= version(lowest[1])[:2]
    assert version(google.protobuf.__version__) >= version(generated[1])


def test_batch_round_trip_keeps_terminated_truncated_and_lost_lives_apart():
    t = transitions()
    t.truncated[1] = True
    assert not decode_batch(encode(t)).HasField("life_lost")  # sent only where a life was lost
    t.life_lost[2] = True
    batch = decode_batch(encode(t))
    assert batch.protocol_version == PROTOCOL_VERSION
    assert (batch.actor_id, batch.incarnation, batch.seq, batch.policy_version) == ("a", 1, 3, 2)
    back = validate_batch(batch, *CARTPOLE)
    for name in ("observation", "action", "reward", "next_observation", "terminated",
                 "truncated", "life_lost", "episode_id", "episode_step", "deterministic_action"):
        np.testing.assert_array_equal(getattr(back, name), getattr(t, name))
    assert back.terminated.tolist() == [False] * 4 + [True]
    assert back.truncated.tolist() == [False, True, False, False, False]
    assert back.life_lost.tolist() == [False, False, True, False, False]
    batch.life_lost.CopyFrom(to_tensor(np.ones(4, np.uint8)))  # one row short
    with pytest.raises(BatchError, match="life_lost: shape"):
        validate_batch(batch, *CARTPOLE)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: setattr(t, "observation", t.observation[:, :3]), "observation: shape"),
        (lambda t: t.next_observation.__setitem__((0, 0), np.nan), "non-finite"),
        (lambda t: t.action.__setitem__(0, 5), "outside"),
        (lambda t: setattr(t, "episode_id", t.episode_id[:2]), "episode_id: shape"),
    ],
)
def test_validation_rejects_broken_batches(change, message):
    t = transitions()
    change(t)
    with pytest.raises(BatchError, match=message):
        validate_batch(decode_batch(encode(t)), *CARTPOLE)


def test_validation_checks_dtypes_as_sent():
    batch = decode_batch(encode(transitions()))
    batch.reward.CopyFrom(to_tensor(np.ones(5, np.float64)))
    with pytest.raises(BatchError, match="reward: dtype float64"):
        validate_batch(batch, *CARTPOLE)
    batch.reward.CopyFrom(wire_pb2.Tensor(dtype="float32", shape=[5], data=b"123"))
    with pytest.raises(BatchError, match="do not fill"):
        validate_batch(batch, *CARTPOLE)


def test_continuous_batches_need_float32_actions_of_the_right_width():
    good = transitions(obs_dim=3, action=np.zeros((5, 1), np.float32))
    validate_batch(decode_batch(encode(good)), *PENDULUM)
    bad = transitions(obs_dim=3, action=np.zeros((5, 2), np.float32))
    with pytest.raises(BatchError, match="action: shape"):
        validate_batch(decode_batch(encode(bad)), *PENDULUM)


def test_undecodable_bytes_are_a_batch_error():
    with pytest.raises(BatchError, match="not a TrajectoryBatch"):
        decode_batch(b"\xff\xff\xff\xff not a protobuf")


def test_policy_chunks_are_at_most_one_mib_and_carry_sha256():
    model = np.random.default_rng(0).bytes(2 * POLICY_CHUNK_BYTES + 123)
    chunks = list(policy_chunks(7, model))
    assert len(chunks) == 3
    assert all(len(c.data) <= POLICY_CHUNK_BYTES for c in chunks)
    assert chunks[0].sha256 == hashlib.sha256(model).hexdigest()
    assert chunks[0].total_bytes == len(model)
    assert assemble_policy(chunks) == (7, model)
    chunks[1].data = chunks[1].data[:-1] + b"x"
    with pytest.raises(BatchError, match="damaged"):
        assemble_policy(chunks)
    assert assemble_policy([]) is None


def test_frames_go_on_the_wire_once():
    """An image batch sends each frame once: every row's next frame, and a row's own frame
    only where no earlier row's next frame gives it (episode starts, the batch's first rows);
    the learner rebuilds the rest, and refuses a batch that leaves a row without one."""
    from support.frames import frame_batches

    from edge_rl.device.observations import FRAMES

    batch = frame_batches(3, num_envs=3, batch_size=60)[2]
    spec = ((16, 16, 1), {"kind": "discrete", "n": 4}, "uint8")
    data = encode(batch, observation_kind=FRAMES)
    message = decode_batch(data)
    sent_rows = message.observation_rows.shape[0]
    episodes = len(np.unique(batch.episode_id))
    assert sent_rows <= episodes  # one frame per episode piece in the batch, not one per row
    assert len(data) < (len(batch) + episodes) * 256 + 64 * len(batch)
    back = validate_batch(message, *spec)
    np.testing.assert_array_equal(back.observation, batch.observation)
    np.testing.assert_array_equal(back.next_observation, batch.next_observation)

    rows = np.frombuffer(message.observation_rows.data, np.int64)
    tampered = decode_batch(data)  # row 0's frame left out: no earlier row gives it
    tampered.observation_rows.CopyFrom(to_tensor(rows[1:]))
    tampered.observation.CopyFrom(to_tensor(back.observation[rows[1:]]))
    with pytest.raises(BatchError, match="neither sent nor"):
        validate_batch(tampered, *spec)


def test_stacked_frames_go_on_the_wire_once():
    """4-frame stacks: each row sends its newest next frame, not its whole next stack, and
    the learner rebuilds every observation and next observation exactly."""
    from support.frames import stacked_frame_batches

    from edge_rl.device.observations import FRAMES

    batch = stacked_frame_batches(2, num_envs=3, batch_size=60)[1]
    spec = ((8, 8, 4), {"kind": "discrete", "n": 2}, "uint8")
    data = encode(batch, observation_kind=FRAMES, frame_stack=4)
    message = decode_batch(data)
    assert message.next_frame_channels == 1
    assert list(message.next_observation.shape) == [len(batch), 8, 8, 1]
    episodes = len(np.unique(batch.episode_id))
    assert len(data) < (len(batch) + 4 * episodes) * 64 + 64 * len(batch)
    back = validate_batch(message, *spec)
    np.testing.assert_array_equal(back.observation, batch.observation)
    np.testing.assert_array_equal(back.next_observation, batch.next_observation)

    # an env whose next stack is not its stack shifted by a frame sends whole stacks
    odd = decode_batch(data)
    batch.next_observation[0, ..., 0] ^= 1
    whole = decode_batch(encode(batch, observation_kind=FRAMES, frame_stack=4))
    assert whole.next_frame_channels == 0
    np.testing.assert_array_equal(validate_batch(whole, *spec).next_observation,
                                  batch.next_observation)
    odd.next_frame_channels = 3  # does not divide 4 channels
    with pytest.raises(BatchError, match="next_frame_channels"):
        validate_batch(odd, *spec)
