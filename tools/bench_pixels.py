"""Image policies on this machine: batch-1 inference of DQN's two CNNs through TF-Agents' own
greedy policy (what `--actor-precision tf-fp32` actors run) and through LiteRT at each
precision, the files' sizes (the bytes of each broadcast), the Edge TPU operator check and
TFLite Micro's arena; then frames on their way to the learner: wire and replay bytes a
transition, and the learner's ingest rate (docs/pixels.md).

    python tools/bench_pixels.py             # both CNNs, 2000 invokes each (~2 min)
    python tools/bench_pixels.py --quick     # 100 invokes each, fewer transitions (CI)

The networks are the ones `edge-rl train` builds (edge_rl.agents.dqn with its image encoder)
for MinAtar-sized planes (10x10x4, one 3x3 convolution, 128 units) and Atari frames (84x84x4,
the Nature DQN's three convolutions, 512 units), with fresh weights: a dense network's time
does not depend on its values. Calibration rows are random frames (planes of 0/1, frames of
0..255). Every file is timed by `edge-rl bench latency`'s code (edge_rl.device.bench_latency),
one thread, batch 1.

The frames table steps each env (BrightPatch always; MinAtar Breakout, Atari Pong and Atari
Breakout, which loses lives, where their extras are installed) with random actions through
the actor's own `Rollout` and `encode_batch`, and times what the learner does with each
batch: `decode_batch`, `validate_batch` (which rebuilds the frames sent once) and
`Replay.insert`. "Whole" is what the same transitions cost with an observation and a next
observation each.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench_common import cpu_model, table  # noqa: E402

# name -> (observation kind, shape as MinAtar and Atari give them, Dense widths after the
# convolutions: MinAtar's 128, the Nature DQN's 512, each in both dueling streams)
CASES = {
    "MinAtar-sized (10x10x4 planes)": ("planes", (10, 10, 4), (128,)),
    "Nature DQN (84x84x4 frames)": ("frames", (84, 84, 4), (512,)),
}
PRECISIONS = ("fp32", "fp16", "int8", "edgetpu")


def build(kind_name: str, shape: tuple[int, ...], hidden: tuple[int, ...]):
    """DQN's agent for these observations (4 actions) and its metadata maker."""
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig
    from edge_rl.device.observations import KINDS, ObservationSpec
    from edge_rl.device.policy_file import PolicyMetadata

    observation = ObservationSpec(KINDS[kind_name], shape)
    action = {"kind": "discrete", "n": 4}
    factory = get_algorithm("dqn")
    config = resolve_defaults(factory, TrainConfig(algo="dqn", env="bench", hidden=hidden),
                              observation, action)
    built = factory.build(observation, action, config)

    def metadata(precision: str) -> PolicyMetadata:
        return PolicyMetadata(env_id="bench", algo="dqn", precision=precision,
                              output="q_values", observation_shape=shape, action=action,
                              observation=kind_name)

    return built, observation, metadata


def random_observations(observation, n: int, seed: int = 0) -> np.ndarray:
    high = int(observation.kind.value_max)
    rng = np.random.default_rng(seed)
    return rng.integers(0, high + 1, (n, *observation.shape)).astype(np.uint8)


def tf_agents_latency_us(built, metadata, observation, invokes: int) -> float:
    """Median batch-1 time of the TF-Agents greedy policy, as a tf-fp32 actor calls it."""
    from edge_rl.tf_policy import SavedPolicyWriter, TFAgentsPolicy

    policy = TFAgentsPolicy(SavedPolicyWriter(built.agent).write(metadata("fp32")))
    rows = random_observations(observation, 64)
    for i in range(20):
        policy.outputs(rows[i % 64][None])
    times = np.empty(invokes)
    for i in range(invokes):
        start = time.perf_counter_ns()
        policy.outputs(rows[i % 64][None])
        times[i] = time.perf_counter_ns() - start
    return float(np.median(times) / 1e3)


def measure(name: str, kind_name: str, shape: tuple[int, ...], hidden: tuple[int, ...],
            invokes: int, folder: Path) -> list[list[str]]:
    from edge_rl.converters import convert
    from edge_rl.converters.edgetpu import edgetpu_problems
    from edge_rl.converters.tflm import arena_size
    from edge_rl.device.bench_latency import measure_latency

    built, observation, metadata = build(kind_name, shape, hidden)
    calibration = random_observations(observation, 300, seed=1)
    baseline = tf_agents_latency_us(built, metadata, observation, invokes)
    rows = [[name, "TF-Agents greedy policy (fp32)", "-", f"{baseline:.0f}", "1.00", ""]]
    for precision in PRECISIONS:
        path = folder / f"{kind_name}-{precision}.tflite"
        flat = convert(built.export_model, precision, calibration, metadata(precision))
        path.write_bytes(flat)
        latency = measure_latency(path, invokes=invokes, warmup=min(100, invokes))
        notes = []
        if precision == "edgetpu":
            problems = edgetpu_problems(flat)
            notes.append("Edge TPU check: " + ("passes" if not problems else problems[0]))
        if precision == "int8":
            notes.append(f"TFLite Micro arena {arena_size(flat).with_margin / 1024:.1f} KiB")
        rows.append([name, f"LiteRT {precision}", f"{len(flat) / 1024:.1f} KiB",
                     f"{latency.median_us:.0f}", f"{baseline / latency.median_us:.2f}",
                     "; ".join(notes)])
    return rows


# env -> the module its extra installs. Atari Breakout loses lives inside an episode, which
# must not cost whole stacks; Pong has none.
FRAME_ENVS = {"EdgeRL/BrightPatch-v0": None, "MinAtar/Breakout-v1": "minatar",
              "ALE/Pong-v5": "ale_py", "ALE/Breakout-v5": "ale_py"}


def frames_row(env_id: str, transitions: int, batch: int = 64) -> list[str]:
    """One env's wire and replay bytes a transition and the learner's ingest rate."""
    from edge_rl.device.envs import describe_env
    from edge_rl.device.rollout import Rollout
    from edge_rl.device.wire import decode_batch, encode_batch, validate_batch
    from edge_rl.replay.buffer import Replay

    observation, action = describe_env(env_id)
    rollout = Rollout(env_id, 1, seed=0, batch_size=batch, action_example=np.int64(0))
    rng = np.random.default_rng(0)
    batches = []
    while len(batches) * batch < transitions:
        actions = rng.integers(0, action["n"], 1)
        batches += rollout.step(actions, actions)
    rollout.close()
    payloads = [encode_batch(b, run_id="bench", actor_id="a", incarnation=1, seq=i,
                             policy_version=1, observation_kind=observation.kind,
                             frame_stack=rollout.stack) for i, b in enumerate(batches)]
    n = sum(len(b) for b in batches)
    replay = Replay(n, observation.shape, (), "int64", gamma=0.99,
                    observation_dtype=observation.dtype, once=True, stack=observation.stack)
    start = time.perf_counter()
    for payload in payloads:
        replay.insert(0, validate_batch(decode_batch(payload), observation.shape, action,
                                        observation.dtype))
    seconds = time.perf_counter() - start
    kept = sum(o.nbytes for o in (*replay.final_observations.values(),
                                  *replay.stacks.values()))
    replay_bytes = (replay.data["observation"].nbytes + kept) / n
    whole = 2 * int(np.prod(observation.shape))  # an observation and a next one, uint8
    wire = sum(len(p) for p in payloads) / n
    return [env_id, f"{observation.kind.name} {list(observation.shape)}",
            f"{wire:,.0f} ({whole:,})", f"{replay_bytes:,.0f} ({whole:,})",
            f"{n / seconds:,.0f}"]


def frames_table(transitions: int) -> str:
    import importlib.util

    rows = [frames_row(env_id, transitions) for env_id, module in FRAME_ENVS.items()
            if module is None or importlib.util.find_spec(module) is not None]
    return table(["env", "observations", "wire bytes a transition (whole)",
                  "replay bytes a transition (whole)", "ingest transitions/s"], rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 invokes a file (CI)")
    parser.add_argument("--invokes", type=int, default=2000)
    args = parser.parse_args()
    invokes = 100 if args.quick else args.invokes
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-pixels-") as folder:
        for name, (kind_name, shape, hidden) in CASES.items():
            rows += measure(name, kind_name, shape, hidden, invokes, Path(folder))
    print(f"Batch-1 inference on {cpu_model()}, one thread, median of {invokes} invokes; "
          "speed-up against the TF-Agents policy of the same network")
    print(table(["network", "runs as", "file", "median µs", "speed-up", "notes"], rows))
    transitions = 1_000 if args.quick else 10_000
    print(f"\nFrames to the learner: {transitions:,} random-action transitions an env, each "
          "frame sent and stored once")
    print(frames_table(transitions))
    failed = [r for r in rows if "Edge TPU check:" in r[5] and "passes" not in r[5]]
    if failed:  # a CNN the Edge TPU cannot take is a failure of the image path, not a figure
        print(f"error: {failed[0][0]}: {failed[0][5]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
