"""Benchmark of the training loop's parts, measured side by side in one run.

    python tools/bench_loop.py [--quick] [--json PATH]

Prints markdown tables of:
  1. inference latency at batch 1 of a HalfCheetah TD3 actor (17 -> hidden -> 6, tanh) at
     256x256, 1024x1024 and 2048x2048x2048, as the learner publishes it (Learner.publish,
     Learner.publish_tf_agents) to each kind of actor: TF-Agents' own fp32 policy (a
     SavedModel in SavedModelPyTFEagerPolicy, tf.function on: `--actor-precision tf-fp32`),
     LiteRT fp32 and LiteRT int8 (edge_rl.device.Policy);
  2. HalfCheetah-v5 steps/s at each size: the env alone (precomputed random actions), and
     edge-rl's actor (edge_rl.device.actor.Actor, run in this process: inference, gaussian
     exploration, batching, spooling, and gRPC inserts to a learner service on loopback that
     takes each batch into replay and acks it at once) with each backend. TF-Agents steps one
     env per inference, as its PyDriver does; the LiteRT actors step --num-envs copies per
     batched inference, as `edge-rl actor` does, and once with a single env for comparison;
  3. a real `edge-rl actor` process (int8, 256x256, --num-envs copies) joined to that service:
     its steps/s, peak RSS, time from spawn to its first batch, and publish latency: new
     weights -> Learner.publish patches the file -> the service offers it -> the first batch
     the actor acted on with it arrives (an upper bound on "new weights -> an actor acting
     with them": it includes up to one batch of stepping);
  4. the learner (TD3 HalfCheetah 256x256, batch 256; DQN CartPole, its defaults) on a
     pre-filled replay: `agent.train` called once per update on a pre-built batch (the TF-Agents
     way), edge-rl's in-graph chunk of updates on pre-built batches, the learner's hot path
     (replay sampling with n-step assembly + host-to-tensor copies + the chunk), and the hot
     path with a policy published every 1000 updates (patched, and converted in full);
  5. `edge-rl train`-like runs (edge_rl.loop.train.run_training, one actor process) reporting the
     learner's updates/s with actors attached.
Variants are interleaved in rounds so that other load falls on all of them alike. --quick
runs every part once, tiny (256x256 only, the DQN learner only): a check that it all runs.

One script past ~400 lines, on purpose: its sections measure the loop's stages side by side
in one run, so their ratios share one machine state; each section calls the product.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

import edge_rl  # noqa: F401  (sets TF_USE_LEGACY_KERAS before anything imports TensorFlow)
from edge_rl.tf_setup import tf

# isort: split
from bench_common import cpu_model, table  # tools/, on the path as the script's folder

from edge_rl.agents import get_algorithm
from edge_rl.algorithm import resolve_defaults
from edge_rl.config import TrainConfig
from edge_rl.converters import convert
from edge_rl.core import ActorPolicy
from edge_rl.device.actor import Actor
from edge_rl.device.client import LearnerClient
from edge_rl.device.envs import describe_env, make_env
from edge_rl.device.exploration import ExplorationSettings
from edge_rl.device.policy import load_published
from edge_rl.device.runtime import load_runtime
from edge_rl.device.spool import Spool
from edge_rl.device.wire import Transitions
from edge_rl.loop.learner import Learner, to_trajectory
from edge_rl.loop.local_actors import LocalActors
from edge_rl.loop.train import UPDATES_PER_CHUNK, run_training
from edge_rl.replay.buffer import Replay
from edge_rl.transport.ingest import Ingest
from edge_rl.transport.server import LearnerService, RunInfo, start_server

ENV_ID = "HalfCheetah-v5"
OBSERVATION, ACTION = describe_env(ENV_ID)
OBS_SHAPE = OBSERVATION.shape
SIZES = {"256x256": (256, 256), "1024x1024": (1024, 1024), "2048x2048x2048": (2048,) * 3}
TF_AGENTS, LITERT_FP32, LITERT_INT8 = "TF-Agents fp32", "LiteRT fp32", "LiteRT int8"
LEARNERS = (("td3", ENV_ID), ("dqn", "CartPole-v1"))
BATCH_TRANSITIONS = 256  # --batch-transitions of the measured actors (edge-rl's default: 64)
PUBLISH_EVERY = TrainConfig.publish_every
SPOOL_BYTES = 256_000_000  # an in-process actor's memory spool (`edge-rl actor`'s default)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="every part once, tiny: 256x256 only, the DQN learner only, few "
                             "calls and steps (CI runs it; ~1 min)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--num-envs", type=int, default=8, help="env copies per LiteRT actor")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    quick = args.quick
    args.sizes = ["256x256"] if quick else list(SIZES)
    args.learners = LEARNERS[1:] if quick else LEARNERS
    args.calls = 100 if quick else 2000  # latency samples per backend and size
    # env steps per loop variant and size; quick: enough for a few batches of every variant
    args.steps = 4_096 if quick else 30_000
    args.rounds = 1 if quick else 5
    args.updates = 100 if quick else 1_000  # learner updates per variant and round
    args.publish_every = 50 if quick else PUBLISH_EVERY  # in the learner's hot path
    args.publishes = 2 if quick else 20
    args.window = 1.0 if quick else 5.0  # seconds the actor process's steps/s is counted
    args.train_steps = 2_500 if quick else 16_000
    args.warmup_steps = 1_000 if quick else 2_000
    return args


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def td3_learner(hidden: tuple[int, ...]) -> Learner:
    """A TD3 learner for HalfCheetah whose actor network (what actors run) has `hidden`
    layers; its critics keep TD3's default 256x256."""
    factory = get_algorithm("td3")
    config = resolve_defaults(factory, TrainConfig(env=ENV_ID, algo="td3", hidden=hidden,
                                                   critic_hidden=(256, 256)))
    return Learner(factory, config, OBSERVATION, ACTION)


def publish(learner: Learner, backend: str, calibration: np.ndarray, version: int) -> bytes:
    """`learner`'s actor network as the learner publishes it to `backend` actors."""
    if backend == TF_AGENTS:  # --actor-precision tf-fp32
        return learner.publish_tf_agents(version)
    precision = {LITERT_FP32: "fp32", LITERT_INT8: "int8"}[backend]
    return learner.publish(precision, calibration, version)[0]


# -- a learner service that acks at once ---------------------------------------------------------


class Sink:
    """A real LearnerService on loopback whose batches go into replay (through the learner's
    Ingest, with its replay log in a temp folder) and are acked as soon as they arrive."""

    def __init__(self, num_envs: int, run_id: str = "bench"):
        self.folder = tempfile.TemporaryDirectory(prefix="edge-rl-bench-sink-")
        replay = Replay(100_000, OBS_SHAPE, tuple(ACTION["shape"]), "float32", gamma=0.99)
        self.ingest = Ingest(Path(self.folder.name) / "replay-log", replay, {}, {}, (0, 0))
        self.exchange = self.ingest.exchange
        self.run = RunInfo(run_id=run_id, env_id=ENV_ID, algo="td3", observation_shape=OBS_SHAPE,
                           action=ACTION, batch_transitions=BATCH_TRANSITIONS, max_in_flight=4,
                           lockstep=False, num_envs=num_envs, seed=0,
                           exploration=lambda i: ExplorationSettings(kind="gaussian",
                                                                     noise_std=0.1))
        self.service = LearnerService(self.run, self.exchange)
        self.server, self.port = start_server(self.service, 0, 16)
        self.version = 0  # of the newest policy offered
        self.joined = 0  # in-process actors so far (each gets its own id)
        self.arrivals: queue.Queue = queue.Queue()  # (time, transitions, policy_version)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def offer(self, policy_file: Callable[[int], bytes]) -> None:
        """Offer the next policy version, made by `policy_file(version)`."""
        self.version += 1
        self.exchange.put_policy(self.version, policy_file(self.version))

    def _drain(self) -> None:
        forget_at = time.monotonic() + 2.0
        while not self._stop.is_set():
            taken = self.ingest.take(block=True)
            self.ingest.release_all()
            now = time.perf_counter()
            for pending in taken:
                self.arrivals.put((now, len(pending.transitions), pending.policy_version))
            if time.monotonic() > forget_at:  # nothing needs the log: keep the folder small
                self.ingest.log.forget_before(self.ingest.position)
                forget_at = time.monotonic() + 2.0

    def close(self) -> None:
        self.exchange.stop_taking()
        self._stop.set()
        self.server.stop(grace=0.5)
        self._thread.join()
        self.ingest.close()
        self.folder.cleanup()


def actor_loop(sink: Sink, policy_file: Callable[[int], bytes], num_envs: int,
               steps: int) -> float:
    """Steps/s of edge-rl's actor, in this process, acting in `num_envs` env copies for
    `steps` env steps with the policy `policy_file(version)` makes (from its first action to
    its last: the env copies' start and the policy's loading are left out)."""
    sink.offer(policy_file)
    sink.service.run = dataclasses.replace(sink.run, num_envs=num_envs)
    sink.joined += 1
    client = LearnerClient(sink.address, f"bench-loop-{sink.joined}", 0)
    try:
        actor = Actor(client, Spool(None, SPOOL_BYTES), max_steps=steps)
        actor.run()
    finally:
        client.close()
    acted, seconds = actor.acting
    return acted / seconds


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


def time_calls(backends: dict[str, ActorPolicy], calls: int, rounds: int,
               rng: np.random.Generator) -> dict[str, float]:
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


def interleave(variants: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Median of each variant's value over interleaved rounds."""
    values: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, measure in variants.items():
            gc.collect()
            values[name].append(measure())
    return {name: statistics.median(v) for name, v in values.items()}


# -- 1 and 2: inference and actor loops ----------------------------------------------------------


def bench_actors(args: argparse.Namespace, rng: np.random.Generator) -> dict:
    results: dict = {"latency_us": {}, "steps_per_s": {}}
    calibration = rng.normal(size=(500, *OBS_SHAPE)).astype(np.float32)
    sink = Sink(args.num_envs)
    try:
        for size in args.sizes:
            progress(f"actors {size}: building and publishing")
            learner = td3_learner(SIZES[size])
            files = {name: partial(publish, learner, name, calibration)
                     for name in (TF_AGENTS, LITERT_FP32, LITERT_INT8)}
            backends = {name: load_published(policy_file(0)) for name, policy_file in files.items()}
            progress(f"actors {size}: latency, {args.calls} calls per backend")
            results["latency_us"][size] = time_calls(backends, args.calls, args.rounds, rng)
            progress(f"actors {size}: loops, {args.steps} steps per variant")
            loops = actor_loops(sink, files, args.steps // args.rounds, args.num_envs, args.seed)
            results["steps_per_s"][size] = interleave(loops, args.rounds)
    finally:
        sink.close()
    return results


def actor_loops(sink: Sink, files: dict[str, Callable[[int], bytes]], steps: int, n: int,
                seed: int) -> dict[str, Callable[[], float]]:
    """The loop variants of one size: name -> a function giving steps/s for `steps` steps."""
    return {
        "env only": lambda: env_only(steps, seed),
        # TF-Agents' loop is ~20x slower: fewer steps keep its rounds about as long
        "TF-Agents fp32, 1 env": lambda: actor_loop(sink, files[TF_AGENTS], 1, steps // 8),
        f"LiteRT fp32, {n} envs": lambda: actor_loop(sink, files[LITERT_FP32], n, steps),
        f"LiteRT int8, {n} envs": lambda: actor_loop(sink, files[LITERT_INT8], n, steps),
        "LiteRT int8, 1 env": lambda: actor_loop(sink, files[LITERT_INT8], 1, steps),
    }


# -- 3: a real actor process: steps/s, RSS, time to first action, publish latency ----------------


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def bench_actor_process(args: argparse.Namespace, rng: np.random.Generator) -> dict:
    progress("actor process: publishing, starting `edge-rl actor`")
    learner = td3_learner(SIZES["256x256"])
    model = learner.built.export_model
    calibration = rng.normal(size=(500, *OBS_SHAPE)).astype(np.float32)
    int8 = partial(publish, learner, LITERT_INT8, calibration)
    sink = Sink(args.num_envs)
    sink.offer(int8)
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
        while time.perf_counter() - window_start < args.window:
            count += sink.arrivals.get(timeout=30)[1]
        steps_per_s = count / (time.perf_counter() - window_start)
        # publish latency: new weights -> file patched -> offered -> first batch acted with it
        patch_ms, end_to_end_ms = [], []
        for _ in range(args.publishes):
            model.set_weights([w + rng.normal(scale=0.01, size=w.shape).astype(np.float32)
                               for w in model.get_weights()])
            start = time.perf_counter()
            sink.offer(int8)
            patched = time.perf_counter()
            while True:
                arrived, _, acted_with = sink.arrivals.get(timeout=30)
                if acted_with >= sink.version:
                    break
            patch_ms.append((patched - start) * 1e3)
            end_to_end_ms.append((arrived - start) * 1e3)
            time.sleep(0.2)
        rss = peak_rss_mb(pid)
        # as a finishing learner does: the actor hears "stop" in its next heartbeat
        sink.exchange.stop_taking()
        sink.exchange.wait_for_goodbyes(timeout=3.0)
    finally:
        actors.stop()
        sink.close()
        shutil.rmtree(logs, ignore_errors=True)
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


def bench_learner(args: argparse.Namespace, algo: str, env_id: str) -> dict:
    progress(f"learner {algo} {env_id}: {args.updates} updates per variant and round")
    factory = get_algorithm(algo)
    config = resolve_defaults(factory, TrainConfig(env=env_id, algo=algo))
    observation, action = describe_env(env_id)
    learner = Learner(factory, config, observation, action)
    replay = filled_replay(config, observation.shape, action, 50_000, args.seed)
    batch, chunk = config.batch_size, UPDATES_PER_CHUNK
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

    def hot_path_rate(publishing: str | None) -> float:
        start = time.perf_counter()
        for i in range(args.updates // chunk):
            learner.train(replay.sample(batch * chunk), chunk)
            if publishing and (i + 1) * chunk % args.publish_every == 0:
                if publishing == "patch":
                    learner.publish("int8", calibration, next(versions))
                else:
                    convert(learner.built.export_model, "int8", calibration,
                            learner.metadata("int8", 0, env_id))
        return args.updates / (time.perf_counter() - start)

    for warm in (per_call_rate, in_graph_rate, lambda: hot_path_rate("patch")):
        warm()  # traces, the first conversion
    every = args.publish_every
    variants = {
        "agent.train per call, pre-built batch": per_call_rate,
        f"in-graph chunks of {chunk}, pre-built batches": in_graph_rate,
        "hot path (replay sample + chunk), no publishing": lambda: hot_path_rate(None),
        f"hot path, patched int8 publish every {every}": lambda: hot_path_rate("patch"),
        f"hot path, full int8 conversion every {every}": lambda: hot_path_rate("convert"),
    }
    return interleave(variants, args.rounds)


# -- 5: learner updates/s with an actor process attached -----------------------------------------


def bench_training(args: argparse.Namespace, algo: str, env_id: str) -> dict:
    progress(f"training {algo} {env_id}: {args.train_steps} env steps with one actor process")
    with tempfile.TemporaryDirectory(prefix="edge-rl-bench-") as out:
        config = TrainConfig(env=env_id, algo=algo, steps=args.train_steps, seed=args.seed,
                             out=str(Path(out) / "run"), warmup_steps=args.warmup_steps,
                             eval_every=10**9, eval_episodes=1, checkpoint_every=10**9,
                             num_envs=args.num_envs, batch_transitions=BATCH_TRANSITIONS)
        summary = run_training(config)
    return {"updates_per_s": summary["learner_updates_per_second"],
            "wall_clock_s": summary["wall_clock_seconds"], "updates": summary["updates"]}


# -- report ---------------------------------------------------------------------------------------


def report(args: argparse.Namespace, r: dict) -> None:
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
        ["publish: Learner.publish, the int8 file patched (median)",
         f"{p['patch_ms_median']:.1f} ms"],
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
          f"steps, {args.warmup_steps} warm-up, {n} envs; from the first chunk of updates to "
          "the last)\n")
    print(table(["run", "updates/s", "/ agent.train per call", "/ in-graph pre-built"], rows))


def main() -> None:
    args = parse_args()
    rng = np.random.default_rng(args.seed)
    tf.keras.utils.set_random_seed(args.seed)
    start, load = time.perf_counter(), os.getloadavg()[0]
    results: dict = {"actors": bench_actors(args, rng),
                     "actor_process": bench_actor_process(args, rng),
                     "learner": {}, "training": {}}
    for algo, env_id in args.learners:
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
