"""Benchmark: TensorFlow fp32 actors vs LiteRT fp32 / int8 actors, side by side in one run.

    python tools/bench_actors.py [--quick] [--json PATH] [--threads N]

Measures, on this machine:
  1. per-inference latency at batch 1 of a HalfCheetah-sized MLP actor (17 -> hidden -> 6,
     tanh) for TensorFlow (a Keras model through a tf.function with a fixed input signature,
     and TF-Agents' PyTFEagerPolicy around an ActorPolicy) and for LiteRT fp32 and int8
     (edge_rl.converters.convert, run by edge_rl.device.policy.Policy);
  2. HalfCheetah-v5 steps/s: the env alone, and the actor loop (inference + Explorer +
     BatchBuilder of 64 + wire.encode_batch, no network send) with each actor at 256x256;
  3. how long `convert(..., "int8", ...)` takes for the 256x256 actor.
Backends are measured interleaved, in rounds, so that load from other processes lands on all
of them alike. Prints markdown tables to stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

import edge_rl  # noqa: F401  (sets TF_USE_LEGACY_KERAS before anything imports TensorFlow)
from edge_rl.tf_setup import tf  # quiet TF logs and gym's import notice

# isort: split
from tf_agents.policies import actor_policy, py_tf_eager_policy
from tf_agents.trajectories import time_step as ts

from edge_rl.agents.networks import deterministic_actor, export_model
from edge_rl.agents.specs import tf_specs
from edge_rl.converters import convert
from edge_rl.device.actor import BatchBuilder
from edge_rl.device.envs import make_env
from edge_rl.device.exploration import ExplorationSettings, Explorer
from edge_rl.device.policy import Policy
from edge_rl.device.policy_file import PolicyMetadata
from edge_rl.device.runtime import load_runtime
from edge_rl.device.wire import encode_batch

ENV_ID = "HalfCheetah-v5"
OBS_SHAPE = (17,)
ACTION = {"kind": "continuous", "shape": [6], "low": [-1.0] * 6, "high": [1.0] * 6}
SIZES = {"256x256": (256, 256), "1024x1024": (1024, 1024), "2048x2048x2048": (2048,) * 3}
LOOP_SIZE = "256x256"
BATCH_TRANSITIONS = 64

Infer = Callable[[np.ndarray], np.ndarray]  # float32 [1, 17] -> float32 [1, 6]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and steps (~1 min)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--threads", type=int, default=1,
                        help="LiteRT num_threads and TF intra-op threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.calls = 600 if args.quick else 2000  # latency samples per backend and size
    args.steps = 3_000 if args.quick else 50_000  # env steps per loop variant
    args.rounds = 3 if args.quick else 10  # interleaved rounds the calls/steps are split into
    args.convert_repeats = 3  # about half a second each at 256x256
    return args


def metadata(precision: str) -> PolicyMetadata:
    return PolicyMetadata(env_id=ENV_ID, algo="td3", precision=precision, output="action",
                          observation_shape=OBS_SHAPE, action=ACTION)


def build_actor(hidden: tuple[int, ...]):
    """(Keras model, TF-Agents actor network) sharing the same layers, as TD3 builds them."""
    time_step_spec, action_spec = tf_specs(OBS_SHAPE, ACTION)
    network = deterministic_actor(time_step_spec.observation, action_spec, hidden)
    model = export_model(OBS_SHAPE, network.layers)  # builds the layers' weights
    return model, network, time_step_spec, action_spec


def tf_function_infer(model) -> Infer:
    """The Keras model through a tf.function with a fixed [1, 17] input signature."""

    @tf.function(input_signature=[tf.TensorSpec([1, *OBS_SHAPE], tf.float32)])
    def call(observation):
        return model(observation, training=False)

    return lambda obs: call(obs).numpy()


def tf_agents_infer(network, time_step_spec, action_spec) -> Infer:
    """TF-Agents' PyTFEagerPolicy (tf.function on) around a deterministic ActorPolicy."""
    policy = actor_policy.ActorPolicy(time_step_spec, action_spec, actor_network=network,
                                      training=False)
    py_policy = py_tf_eager_policy.PyTFEagerPolicy(policy, use_tf_function=True)
    step_type, reward, discount = np.int32(ts.StepType.MID), np.float32(0), np.float32(1)

    def infer(obs: np.ndarray) -> np.ndarray:
        time_step = ts.TimeStep(step_type, reward, discount, obs[0])
        return py_policy.action(time_step).action[None]

    return infer


def litert_infer(model, precision: str, calibration: np.ndarray, threads: int) -> Infer:
    flat = convert(model, precision, calibration, metadata(precision))
    return Policy(flat, num_threads=threads).outputs


def time_calls(backends: dict[str, Infer], calls: int, rounds: int,
               rng: np.random.Generator) -> dict[str, float]:
    """Median microseconds per call at batch 1 for each backend, interleaved in rounds."""
    observations = rng.normal(size=(256, 1, *OBS_SHAPE)).astype(np.float32)
    samples: dict[str, list[float]] = {name: [] for name in backends}
    for infer in backends.values():  # warm-up: traces, allocations, caches
        for obs in observations[:50]:
            infer(obs)
    gc.collect()
    for _ in range(rounds):
        for name, infer in backends.items():
            for i in range(calls // rounds):
                obs = observations[i % len(observations)]
                start = time.perf_counter_ns()
                infer(obs)
                samples[name].append((time.perf_counter_ns() - start) / 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


def env_only(env, actions: np.ndarray, steps: int) -> float:
    """Steps/s stepping the env with precomputed random actions."""
    env.reset(seed=0)
    start = time.perf_counter()
    for t in range(steps):
        _, _, terminated, truncated, _ = env.step(actions[t % len(actions)])
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def actor_loop(env, infer: Infer, steps: int, rng: np.random.Generator) -> float:
    """Steps/s of the device actor's loop: infer, explore, batch, encode (no send)."""
    explorer = Explorer(ExplorationSettings(kind="gaussian", noise_std=0.1), metadata("fp32"),
                        rng)
    builder = BatchBuilder(BATCH_TRANSITIONS, OBS_SHAPE, np.zeros(6, np.float32))
    obs, _ = env.reset(seed=0)
    obs = obs.astype(np.float32)
    episode, episode_step, seq = 0, 0, 0
    start = time.perf_counter()
    for _ in range(steps):
        outputs = infer(obs[None])
        # Policy.greedy for output kind "action" is this clip; the TF actors give no Policy
        actions, det_actions = explorer(outputs, np.clip(outputs, explorer.low, explorer.high))
        next_obs, reward, terminated, truncated, _ = env.step(actions[0])
        full = builder.add(obs, actions[0], det_actions[0], reward, next_obs, terminated,
                           truncated, episode, episode_step)
        episode_step += 1
        if terminated or truncated:
            episode, episode_step = episode + 1, 0
            next_obs, _ = env.reset()
        obs = next_obs.astype(np.float32)
        if full:
            encode_batch(builder.take(), run_id="bench", actor_id="bench", incarnation=0,
                         seq=seq, policy_version=0)
            seq += 1
    return steps / (time.perf_counter() - start)


def time_loops(loops: dict[str, Callable[[int], float]], steps: int,
               rounds: int) -> dict[str, float]:
    """Median steps/s over interleaved rounds of steps/rounds steps each."""
    for loop in loops.values():  # warm-up
        loop(200)
    rates: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(rounds):
        for name, loop in loops.items():
            gc.collect()
            rates[name].append(loop(steps // rounds))
    return {name: statistics.median(values) for name, values in rates.items()}


def time_conversion(model, calibration: np.ndarray, repeats: int) -> float:
    """Median seconds of convert(model, "int8", ...) after one warm-up conversion."""
    convert(model, "int8", calibration, metadata("int8"))
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        convert(model, "int8", calibration, metadata("int8"))
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> None:
    args = parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    tf.keras.utils.set_random_seed(args.seed)
    calibration = rng.normal(size=(500, *OBS_SHAPE)).astype(np.float32)
    wall_start = time.perf_counter()
    load_start = os.getloadavg()[0]
    results: dict = {"latency_us": {}, "int8_max_abs_diff": {}}

    # 1. Latency at batch 1, and the actors at LOOP_SIZE kept for the loops below
    loop_actors: dict[str, Infer] = {}
    loop_model = None
    for size, hidden in SIZES.items():
        progress(f"latency {size}: building and converting")
        model, network, time_step_spec, action_spec = build_actor(hidden)
        backends = {
            "TF tf.function fp32": tf_function_infer(model),
            "TF-Agents PyTFEagerPolicy fp32": tf_agents_infer(network, time_step_spec,
                                                              action_spec),
            "LiteRT fp32": litert_infer(model, "fp32", calibration, args.threads),
            "LiteRT int8": litert_infer(model, "int8", calibration, args.threads),
        }
        check = calibration[:64]
        reference = model(check, training=False).numpy()
        tf_agents_out = np.concatenate([backends["TF-Agents PyTFEagerPolicy fp32"](o[None])
                                        for o in check])
        assert np.allclose(tf_agents_out, reference, atol=1e-5), "TF-Agents policy disagrees"
        int8_out = np.concatenate([backends["LiteRT int8"](o[None]) for o in check])
        results["int8_max_abs_diff"][size] = float(np.abs(int8_out - reference).max())
        progress(f"latency {size}: timing {args.calls} calls per backend")
        results["latency_us"][size] = time_calls(backends, args.calls, args.rounds, rng)
        if size == LOOP_SIZE:
            loop_actors, loop_model = backends, model

    # 2. Env-only vs actor-loop steps/s on HalfCheetah-v5 at LOOP_SIZE
    progress(f"loops: {args.steps} steps per variant on {ENV_ID}")
    env = make_env(ENV_ID)
    env.action_space.seed(args.seed)
    random_actions = np.stack([env.action_space.sample() for _ in range(4096)])
    loops = {"env only (random actions)": lambda n: env_only(env, random_actions, n)}
    for name in ("LiteRT int8", "LiteRT fp32", "TF tf.function fp32",
                 "TF-Agents PyTFEagerPolicy fp32"):
        loops[f"actor loop, {name}"] = (
            lambda n, infer=loop_actors[name]: actor_loop(env, infer, n, rng)
        )
    results["steps_per_s"] = time_loops(loops, args.steps, args.rounds)
    env.close()

    # 3. Conversion time
    progress(f"conversion: int8 {LOOP_SIZE}, median of {args.convert_repeats}")
    results["convert_int8_s"] = time_conversion(loop_model, calibration, args.convert_repeats)

    results["wall_s"] = time.perf_counter() - wall_start
    results["machine"] = {
        "cpu": cpu_model(), "cores": os.cpu_count(), "threads": args.threads,
        "load_avg_1min": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "python": platform.python_version(), "tensorflow": tf.__version__,
        "litert": str(load_runtime()),
    }
    results["args"] = {"quick": args.quick, "calls": args.calls, "steps": args.steps,
                       "rounds": args.rounds, "convert_repeats": args.convert_repeats}

    # Report
    m = results["machine"]
    print(f"## Actor benchmark ({'quick' if args.quick else 'full'})\n")
    print(f"{m['cpu']}, {m['cores']} cores, {m['threads']} inference thread(s), "
          f"TF {m['tensorflow']}, {m['litert']}, 1-min load avg {m['load_avg_1min'][0]} at start, "
          f"{m['load_avg_1min'][1]} at end; {results['wall_s']:.0f} s in all\n")
    print(f"### Latency at batch 1 (median µs over {args.calls} calls)\n")
    rows = []
    for size, lat in results["latency_us"].items():
        fp32, int8 = lat["LiteRT fp32"], lat["LiteRT int8"]
        rows.append([size, f"{lat['TF tf.function fp32']:.0f}",
                     f"{lat['TF-Agents PyTFEagerPolicy fp32']:.0f}", f"{fp32:.1f}",
                     f"{int8:.1f}", f"{fp32 / int8:.2f}x",
                     f"{lat['TF tf.function fp32'] / int8:.1f}x",
                     f"{results['int8_max_abs_diff'][size]:.3f}"])
    print(table(["hidden", "TF tf.function fp32", "TF-Agents PyTFEagerPolicy fp32",
                 "LiteRT fp32", "LiteRT int8", "int8 speed-up vs LiteRT fp32",
                 "int8 speed-up vs tf.function", "int8 max abs diff"], rows))
    print(f"\n### {ENV_ID} steps/s ({LOOP_SIZE} actor, batch of {BATCH_TRANSITIONS} encoded, "
          f"median of {args.rounds} rounds of {args.steps // args.rounds} steps)\n")
    rates = results["steps_per_s"]
    env_rate = rates["env only (random actions)"]
    int8_rate = rates["actor loop, LiteRT int8"]
    rows = [[name, f"{rate:,.0f}", f"{100 * rate / env_rate:.0f}%",
             f"{int8_rate / rate:.2f}x" if name.startswith("actor loop") else "-"]
            for name, rate in rates.items()]
    print(table(["loop", "steps/s", "% of env only", "LiteRT int8 loop / this"], rows))
    print("\n### Conversion\n")
    print(table(["what", "seconds"],
                [[f"convert(..., \"int8\", ...) {LOOP_SIZE}, median of {args.convert_repeats} "
                  "after 1 warm-up", f"{results['convert_int8_s']:.2f}"]]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
