"""Benchmark of the training loop's parts, measured side by side in one run.

    python tools/bench_loop.py [--quick] [--json PATH]

Prints markdown tables of:
  1. inference latency at batch 1 of a HalfCheetah actor (17 -> hidden -> 6, tanh) at
     256x256, 1024x1024 and 2048x2048x2048: TF-Agents' PyTFEagerPolicy fp32 (tf.function on),
     LiteRT fp32 and LiteRT int8 (edge_rl's converter, run by edge_rl.device.Policy);
  2. HalfCheetah-v5 steps/s at each size: the env alone (precomputed random actions), and the
     actor loop (inference, gaussian exploration, batching, encoding, and gRPC inserts to a
     learner service on loopback that acks at once) with each backend. TF-Agents steps one env
     per inference, as its PyDriver does; the LiteRT loops step --num-envs copies per batched
     inference, as `edge-rl actor` does, and once with a single env for comparison;
  3. a real `edge-rl actor` process (int8, 256x256, --num-envs copies) joined to that service:
     its steps/s, peak RSS, time from spawn to its first batch, and publish latency: new
     weights -> PolicyPatcher writes the file -> the service offers it -> the first batch
     the actor acted on with it arrives (an upper bound on "new weights -> an actor acting
     with them": it includes up to one batch of stepping);
  4. the learner (TD3 HalfCheetah 256x256, batch 256; DQN CartPole 64x64, batch 64) on a
     pre-filled replay: `agent.train` called once per update on a pre-built batch (the TF-Agents
     way), edge-rl's in-graph chunk of updates on pre-built batches, the learner's hot path
     (replay sampling with n-step assembly + host-to-tensor copies + the chunk), and the hot
     path with a policy published every 1000 updates (patched, and converted in full);
  5. `edge-rl train`-like runs (edge_rl.train.run_training, one actor process) reporting the
     learner's updates/s with actors attached.
Variants are interleaved in rounds so that other load falls on all of them alike.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import edge_rl  # noqa: F401  (sets TF_USE_LEGACY_KERAS before anything imports TensorFlow)
from edge_rl.tf_setup import tf

# isort: split
from bench_common import cpu_model, table  # tools/, on the path as the script's folder
from tf_agents.policies import actor_policy, py_tf_eager_policy
from tf_agents.trajectories import time_step as ts

from edge_rl.agents import get_algorithm
from edge_rl.agents.parts.networks import deterministic_actor, export_model
from edge_rl.agents.parts.specs import tf_specs
from edge_rl.algorithm import resolve_defaults
from edge_rl.config import TrainConfig
from edge_rl.converters import convert
from edge_rl.converters.patch import PolicyPatcher
from edge_rl.device.client import LearnerClient
from edge_rl.device.envs import describe_env, make_env
from edge_rl.device.exploration import ExplorationSettings, Explorer
from edge_rl.device.policy import Policy
from edge_rl.device.policy_file import PolicyMetadata
from edge_rl.device.rollout import Rollout
from edge_rl.device.runtime import load_runtime
from edge_rl.device.wire import Transitions, encode_batch
from edge_rl.learner import Learner, to_trajectory
from edge_rl.local_actors import LocalActors
from edge_rl.replay import Replay
from edge_rl.server import Exchange, LearnerService, RunInfo, start_server
from edge_rl.train import run_training

ENV_ID = "HalfCheetah-v5"
OBSERVATION, ACTION = describe_env(ENV_ID)
OBS_SHAPE = OBSERVATION.shape
SIZES = {"256x256": (256, 256), "1024x1024": (1024, 1024), "2048x2048x2048": (2048,) * 3}
BATCH_TRANSITIONS = 256  # --batch-transitions of the measured actors (edge-rl's default: 64)
PUBLISH_EVERY = TrainConfig.publish_every


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and steps (~3 min)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--num-envs", type=int, default=8, help="env copies per LiteRT actor")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.calls = 300 if args.quick else 2000  # latency samples per backend and size
    args.steps = 4_000 if args.quick else 30_000  # env steps per loop variant and size
    args.rounds = 2 if args.quick else 5
    args.updates = 200 if args.quick else 1_000  # learner updates per variant and round
    args.publishes = 5 if args.quick else 20
    args.train_steps = 6_000 if args.quick else 16_000
    return args


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def metadata(precision: str) -> PolicyMetadata:
    return PolicyMetadata(env_id=ENV_ID, algo="td3", precision=precision, output="action",
                          observation_shape=OBS_SHAPE, action=ACTION)


def build_actor(hidden: tuple[int, ...]):
    """(Keras model, TF-Agents actor network, specs) sharing the same layers, as TD3 has them."""
    time_step_spec, action_spec = tf_specs(OBSERVATION, ACTION)
    network = deterministic_actor(time_step_spec.observation, action_spec, hidden)
    model = export_model(OBSERVATION, network.layers)
    return model, network, time_step_spec, action_spec


class TfAgentsPolicy:
    """TF-Agents' PyTFEagerPolicy around a deterministic ActorPolicy, one observation a call."""

    def __init__(self, network, time_step_spec, action_spec):
        policy = actor_policy.ActorPolicy(time_step_spec, action_spec, actor_network=network,
                                          training=False)
        self.py_policy = py_tf_eager_policy.PyTFEagerPolicy(policy, use_tf_function=True)
        self.step_type = np.int32(ts.StepType.MID)
        self.reward, self.discount = np.float32(0), np.float32(1)

    def outputs(self, obs: np.ndarray) -> np.ndarray:
        time_step = ts.TimeStep(self.step_type, self.reward, self.discount, obs[0])
        return self.py_policy.action(time_step).action[None]


# -- a learner service that acks at once ---------------------------------------------------------


class Sink:
    """A real LearnerService on loopback whose batches are acked as soon as they arrive."""

    def __init__(self, num_envs: int, run_id: str = "bench"):
        self.exchange = Exchange()
        run = RunInfo(run_id=run_id, env_id=ENV_ID, algo="td3", observation_shape=OBS_SHAPE,
                      action=ACTION, batch_transitions=BATCH_TRANSITIONS, max_in_flight=4,
                      lockstep=False, num_envs=num_envs, seed=0,
                      exploration=lambda i: ExplorationSettings(kind="gaussian", noise_std=0.1))
        self.server, self.port = start_server(LearnerService(run, self.exchange), 0, 16)
        self.arrivals: queue.Queue = queue.Queue()  # (time, transitions, policy_version)
        self._stop = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _drain(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self.exchange.batches.get(timeout=0.1)
            except queue.Empty:
                continue
            self.exchange.inserted(batch)
            batch.acked.set()
            self.arrivals.put((time.perf_counter(), len(batch.transitions), batch.policy_version))

    def close(self) -> None:
        self.exchange.stopping.set()
        self._stop.set()
        self.server.stop(grace=0.5)


def actor_loop(policy, num_envs: int, steps: int, client: LearnerClient, seed: int) -> float:
    """Steps/s of the actor's loop (edge_rl.device.actor.Actor.run's body) with `policy`."""
    explorer = Explorer(ExplorationSettings(kind="gaussian", noise_std=0.1), metadata("fp32"),
                        np.random.default_rng(seed))
    rollout = Rollout(ENV_ID, num_envs, seed, BATCH_TRANSITIONS, np.zeros(6, np.float32))
    in_flight: list = []
    seq = 0
    start = time.perf_counter()
    while rollout.env_steps < steps:
        outputs = policy.outputs(rollout.obs)
        actions, deterministic = explorer(outputs, np.clip(outputs, explorer.low, explorer.high))
        for batch in rollout.step(actions, deterministic):
            data = encode_batch(batch, run_id="bench", actor_id=client.actor_id,
                                incarnation=client.incarnation, seq=seq, policy_version=0)
            seq += 1
            in_flight.append(client.insert(data))
            while len(in_flight) >= 4 or (in_flight and in_flight[0].done()):
                in_flight.pop(0).result()
    for future in in_flight:
        future.result()
    rate = rollout.env_steps / (time.perf_counter() - start)
    rollout.close()
    return rate


def env_only(steps: int, seed: int) -> float:
    env = make_env(ENV_ID)
    env.action_space.seed(seed)
    actions = np.stack([env.action_space.sample() for _ in range(4096)])
    env.reset(seed=seed)
    start = time.perf_counter()
    for t in range(steps):
        _, _, terminated, truncated, _ = env.step(actions[t % len(actions)])
        if terminated or truncated:
            env.reset()
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def time_calls(backends: dict, calls: int, rounds: int, rng) -> dict[str, float]:
    """Median µs per batch-1 call for each backend, interleaved in rounds."""
    observations = rng.normal(size=(256, 1, *OBS_SHAPE)).astype(np.float32)
    samples: dict[str, list[float]] = {name: [] for name in backends}
    for policy in backends.values():
        for obs in observations[:50]:
            policy.outputs(obs)
    for _ in range(rounds):
        for name, policy in backends.items():
            gc.collect()
            for i in range(calls // rounds):
                start = time.perf_counter_ns()
                policy.outputs(observations[i % len(observations)])
                samples[name].append((time.perf_counter_ns() - start) / 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


def interleave(variants: dict, rounds: int) -> dict[str, float]:
    """Median of each variant's value over interleaved rounds."""
    values: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, measure in variants.items():
            gc.collect()
            values[name].append(measure())
    return {name: statistics.median(v) for name, v in values.items()}


# -- 1 and 2: inference and actor loops ----------------------------------------------------------


def bench_actors(args, rng) -> dict:
    results: dict = {"latency_us": {}, "steps_per_s": {}}
    calibration = rng.normal(size=(500, *OBS_SHAPE)).astype(np.float32)
    sink = Sink(args.num_envs)
    client = LearnerClient(sink.address, "bench-loop", 1)
    client.hello()
    n = args.num_envs
    try:
        for size, hidden in SIZES.items():
            progress(f"actors {size}: converting")
            model, network, time_step_spec, action_spec = build_actor(hidden)
            backends = {
                "TF-Agents fp32": TfAgentsPolicy(network, time_step_spec, action_spec),
                "LiteRT fp32": Policy(convert(model, "fp32", None, metadata("fp32"))),
                "LiteRT int8": Policy(convert(model, "int8", calibration, metadata("int8"))),
            }
            progress(f"actors {size}: latency, {args.calls} calls per backend")
            results["latency_us"][size] = time_calls(backends, args.calls, args.rounds, rng)
            progress(f"actors {size}: loops, {args.steps} steps per variant")
            loops = actor_loops(backends, args.steps // args.rounds, n, client, args.seed)
            results["steps_per_s"][size] = interleave(loops, args.rounds)
    finally:
        client.close()
        sink.close()
    return results


def actor_loops(backends: dict, steps: int, n: int, client: LearnerClient, seed: int) -> dict:
    """The loop variants of one size: name -> a function giving steps/s for `steps` steps."""
    return {
        "env only": lambda: env_only(steps, seed),
        # TF-Agents' loop is ~20x slower: fewer steps keep its rounds about as long
        "TF-Agents fp32, 1 env": lambda: actor_loop(backends["TF-Agents fp32"], 1, steps // 8,
                                                    client, seed),
        f"LiteRT fp32, {n} envs": lambda: actor_loop(backends["LiteRT fp32"], n, steps, client,
                                                     seed),
        f"LiteRT int8, {n} envs": lambda: actor_loop(backends["LiteRT int8"], n, steps, client,
                                                     seed),
        "LiteRT int8, 1 env": lambda: actor_loop(backends["LiteRT int8"], 1, steps, client, seed),
    }


# -- 3: a real actor process: steps/s, RSS, time to first action, publish latency ----------------


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def bench_actor_process(args, rng) -> dict:
    progress("actor process: converting, starting `edge-rl actor`")
    model, _, _, _ = build_actor(SIZES["256x256"])
    calibration = rng.normal(size=(500, *OBS_SHAPE)).astype(np.float32)
    patcher = PolicyPatcher(model, "int8", calibration, metadata("int8"))
    sink = Sink(args.num_envs, run_id="bench")
    sink.exchange.put_policy(1, patcher.write(calibration, metadata("int8")))
    logs = Path(tempfile.mkdtemp(prefix="edge-rl-bench-"))
    spawned = time.perf_counter()
    actors = LocalActors(1, sink.address, logs)
    pid = actors.processes[0].pid
    try:
        first = sink.arrivals.get(timeout=120)[0]
        time_to_first_batch = first - spawned
        # steady steps/s over a window of a few seconds
        time.sleep(1.0)
        _drain(sink.arrivals)
        window_start, count = time.perf_counter(), 0
        while time.perf_counter() - window_start < (2.0 if args.quick else 5.0):
            count += sink.arrivals.get(timeout=30)[1]
        steps_per_s = count / (time.perf_counter() - window_start)
        # publish latency: new weights -> file patched -> offered -> first batch acted with it
        patch_ms, end_to_end_ms = [], []
        for version in range(2, 2 + args.publishes):
            for layer in patcher.layers:
                layer.set_weights([w + rng.normal(scale=0.01, size=w.shape).astype(np.float32)
                                   for w in layer.get_weights()])
            start = time.perf_counter()
            flat = patcher.write(calibration,
                                 PolicyMetadata(**{**metadata("int8").__dict__,
                                                   "policy_version": version}))
            patched = time.perf_counter()
            sink.exchange.put_policy(version, flat)
            while True:
                arrived, _, acted_with = sink.arrivals.get(timeout=30)
                if acted_with >= version:
                    break
            patch_ms.append((patched - start) * 1e3)
            end_to_end_ms.append((arrived - start) * 1e3)
            time.sleep(0.2)
        rss = peak_rss_mb(pid)
    finally:
        sink.close()
        actors.stop()
    return {
        "steps_per_s": steps_per_s,
        "time_to_first_batch_s": time_to_first_batch,
        "peak_rss_mb": rss,
        "patch_ms_median": statistics.median(patch_ms),
        "publish_ms_median": statistics.median(end_to_end_ms),
        "publish_ms_max": max(end_to_end_ms),
    }


def _drain(q: queue.Queue) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return


# -- 4: the learner on a pre-filled replay -------------------------------------------------------


def filled_replay(config: TrainConfig, shape, action, size: int, seed: int) -> Replay:
    """A replay of `size` random transitions in episodes of 1000 steps."""
    discrete = action["kind"] == "discrete"
    action_shape = () if discrete else tuple(action["shape"])
    replay = Replay(size, shape, action_shape, "int64" if discrete else "float32",
                    gamma=config.gamma, nstep=config.nstep, seed=seed)
    rng = np.random.default_rng(seed)
    for start in range(0, size, BATCH_TRANSITIONS):
        n = BATCH_TRANSITIONS
        actions = (rng.integers(0, action["n"], n) if discrete
                   else rng.uniform(-1, 1, (n, *action_shape)).astype(np.float32))
        steps = (start + np.arange(n)) % 1000
        replay.insert(0, Transitions(
            observation=rng.normal(size=(n, *shape)).astype(np.float32), action=actions,
            deterministic_action=actions, reward=rng.normal(size=n).astype(np.float32),
            next_observation=rng.normal(size=(n, *shape)).astype(np.float32),
            terminated=np.zeros(n, bool), truncated=steps == 999,
            episode_id=(start + np.arange(n)) // 1000, episode_step=steps))
    return replay


def bench_learner(args, algo: str, env_id: str) -> dict:
    progress(f"learner {algo} {env_id}: {args.updates} updates per variant and round")
    factory = get_algorithm(algo)
    config = resolve_defaults(factory, TrainConfig(env=env_id, algo=algo))
    observation, action = describe_env(env_id)
    learner = Learner(factory, config, observation, action)
    replay = filled_replay(config, observation.shape, action, 50_000, args.seed)
    batch, chunk = config.batch_size, 50  # edge_rl.train.UPDATES_PER_CHUNK
    calibration = replay.recent_observations(500)
    per_call = tf.function(learner.agent.train)
    one = tf.nest.map_structure(lambda x: x[0], to_trajectory(replay.sample(batch)))
    prebuilt = to_trajectory(replay.sample(batch * chunk), chunk)
    versions = iter(range(1, 10**9))

    def per_call_rate() -> float:
        start = time.perf_counter()
        for _ in range(args.updates):
            per_call(one)
        return args.updates / (time.perf_counter() - start)

    def in_graph_rate() -> float:
        start = time.perf_counter()
        for _ in range(args.updates // chunk):
            learner._train_many(prebuilt)
        return args.updates / (time.perf_counter() - start)

    def hot_path_rate(publish: str | None) -> float:
        start = time.perf_counter()
        for i in range(args.updates // chunk):
            learner.train(replay.sample(batch * chunk), chunk)
            if publish and (i + 1) * chunk % PUBLISH_EVERY == 0:
                if publish == "patch":
                    learner.publish("int8", calibration, next(versions))
                else:
                    convert(learner.built.export_model, "int8", calibration,
                            learner.metadata("int8", 0, env_id))
        return args.updates / (time.perf_counter() - start)

    for warm in (per_call_rate, in_graph_rate, lambda: hot_path_rate("patch")):
        warm()  # traces, the first conversion
    variants = {
        "agent.train per call, pre-built batch": per_call_rate,
        f"in-graph chunks of {chunk}, pre-built batches": in_graph_rate,
        "hot path (replay sample + chunk), no publishing": lambda: hot_path_rate(None),
        f"hot path, patched int8 publish every {PUBLISH_EVERY}": lambda: hot_path_rate("patch"),
        f"hot path, full int8 conversion every {PUBLISH_EVERY}": lambda: hot_path_rate("convert"),
    }
    return interleave(variants, args.rounds)


# -- 5: learner updates/s with an actor process attached -----------------------------------------


def bench_training(args, algo: str, env_id: str) -> dict:
    progress(f"training {algo} {env_id}: {args.train_steps} env steps with one actor process")
    with tempfile.TemporaryDirectory(prefix="edge-rl-bench-") as out:
        config = TrainConfig(env=env_id, algo=algo, steps=args.train_steps, seed=args.seed,
                             out=str(Path(out) / "run"), warmup_steps=2_000,
                             eval_every=10**9, eval_episodes=1, checkpoint_every=10**9,
                             num_envs=args.num_envs, batch_transitions=BATCH_TRANSITIONS)
        summary = run_training(config)
    return {"updates_per_s": summary["learner_updates_per_second"],
            "wall_clock_s": summary["wall_clock_seconds"], "updates": summary["updates"]}


# -- report ---------------------------------------------------------------------------------------


def report(args, r: dict) -> None:
    n = args.num_envs
    m = r["machine"]
    print(f"## Loop benchmark ({'quick' if args.quick else 'full'})\n")
    print(f"{m['cpu']}, {m['cores']} cores, TF {m['tensorflow']}, {m['litert']}, 1-min load "
          f"avg {m['load'][0]} at start, {m['load'][1]} at end; {r['wall_s']:.0f} s in all\n")
    print(f"### Inference latency at batch 1 (median µs of {args.calls} calls)\n")
    rows = []
    for size, lat in r["actors"]["latency_us"].items():
        rows.append([size, f"{lat['TF-Agents fp32']:.0f}", f"{lat['LiteRT fp32']:.1f}",
                     f"{lat['LiteRT int8']:.1f}",
                     f"{lat['LiteRT fp32'] / lat['LiteRT int8']:.2f}x",
                     f"{lat['TF-Agents fp32'] / lat['LiteRT int8']:.0f}x"])
    print(table(["hidden", "TF-Agents fp32", "LiteRT fp32", "LiteRT int8",
                 "int8 vs LiteRT fp32", "int8 vs TF-Agents"], rows))
    print(f"\n### {ENV_ID} steps/s (actor loop with gRPC inserts of {BATCH_TRANSITIONS} "
          f"transitions to a service in the same process; median of {args.rounds} rounds)\n")
    rows = []
    for size, rates in r["actors"]["steps_per_s"].items():
        env = rates["env only"]
        int8 = rates[f"LiteRT int8, {n} envs"]
        for name, rate in rates.items():
            rows.append([size, name, f"{rate:,.0f}", f"{100 * rate / env:.0f}%",
                         "-" if name == "env only" else f"{int8 / rate:.2f}x"])
    print(table(["hidden", "loop", "steps/s", "% of env only", f"int8 {n} envs / this"], rows))
    p = r["actor_process"]
    small = r["actors"]["steps_per_s"]["256x256"]
    print(f"\n### `edge-rl actor` process (LiteRT int8, 256x256, {n} envs, batches of "
          f"{BATCH_TRANSITIONS})\n")
    print(table(["what", "value"], [
        ["steps/s (batches arriving at the learner)", f"{p['steps_per_s']:,.0f}"],
        ["steps/s / env only at 256x256 (section above)",
         f"{p['steps_per_s'] / small['env only']:.0%}"],
        ["steps/s / TF-Agents fp32, 1 env at 256x256 (section above)",
         f"{p['steps_per_s'] / small['TF-Agents fp32, 1 env']:.1f}x"],
        ["peak RSS (VmHWM)", f"{p['peak_rss_mb']:.0f} MB"],
        ["spawn -> first batch at the learner (time to first action, upper bound)",
         f"{p['time_to_first_batch_s']:.2f} s"],
        ["publish: PolicyPatcher.write (median)", f"{p['patch_ms_median']:.1f} ms"],
        ["publish: new weights -> first batch acted with them (median / max of "
         f"{args.publishes})", f"{p['publish_ms_median']:.1f} / {p['publish_ms_max']:.1f} ms"],
    ]))
    for key, rates in r["learner"].items():
        print(f"\n### Learner {key} (updates/s, median of {args.rounds} rounds of "
              f"{args.updates})\n")
        base = rates["agent.train per call, pre-built batch"]
        graph = [v for k, v in rates.items() if k.startswith("in-graph")][0]
        off = rates["hot path (replay sample + chunk), no publishing"]
        rows = [[name, f"{rate:.0f}", f"{rate / base:.2f}", f"{rate / graph:.2f}",
                 f"{rate / off:.2f}"] for name, rate in rates.items()]
        print(table(["variant", "updates/s", "/ agent.train per call", "/ in-graph pre-built",
                     "/ hot path without publishing"], rows))
    rows = []
    for key, t in r["training"].items():
        rates = r["learner"][key]
        base = rates["agent.train per call, pre-built batch"]
        graph = [v for k, v in rates.items() if k.startswith("in-graph")][0]
        rows.append([key, f"{t['updates_per_s']:.0f}", f"{t['updates_per_s'] / base:.2f}",
                     f"{t['updates_per_s'] / graph:.2f}"])
    print(f"\n### Learner with an actor process attached (run_training, {args.train_steps} env "
          f"steps, 2000 warm-up, {n} envs; from the first chunk of updates to the last)\n")
    print(table(["run", "updates/s", "/ agent.train per call", "/ in-graph pre-built"], rows))


def main() -> None:
    args = parse_args()
    rng = np.random.default_rng(args.seed)
    tf.keras.utils.set_random_seed(args.seed)
    start, load = time.perf_counter(), os.getloadavg()[0]
    results: dict = {"actors": bench_actors(args, rng),
                     "actor_process": bench_actor_process(args, rng),
                     "learner": {}, "training": {}}
    for algo, env_id in (("td3", ENV_ID), ("dqn", "CartPole-v1")):
        key = f"{algo} {env_id}"
        results["learner"][key] = bench_learner(args, algo, env_id)
        results["training"][key] = bench_training(args, algo, env_id)
    results["wall_s"] = time.perf_counter() - start
    results["machine"] = {"cpu": cpu_model(), "cores": os.cpu_count(),
                          "load": [round(load, 2), round(os.getloadavg()[0], 2)],
                          "python": platform.python_version(), "tensorflow": tf.__version__,
                          "litert": str(load_runtime())}
    report(args, results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
