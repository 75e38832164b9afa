"""Benchmark of the learner's ingest: actors streaming HalfCheetah-sized batches on loopback.

    python tools/bench_ingest.py [--batch-transitions 1000 64] [--paced 100000 10000]
                                 [--actors 4] [--window 8] [--seconds 5] [--rounds 3]
                                 [--streamer-cpus CPU...] [--json PATH] [--quick]

The learner side is an edge_rl.loop.train.Training in this process: TD3 on HalfCheetah-v5 with its
default config (its Learner, Replay, an Ingest whose ReplayLog lives in a temp dir, and its
LearnerService, served on 127.0.0.1), without its loop, actors, evaluations or checkpoints.
--actors streamer processes (tools/ingest_streamer.py: fresh interpreters that import only
edge_rl.device) say Hello and then insert valid HalfCheetah-sized batches (obs 17 floats,
action 6 floats; random finite data, increasing seq, 1000-step episodes) as fast as acks come
back, with --window inserts in flight each.

Measured side by side, in --rounds rounds of every phase (--seconds each; medians reported,
so that other load on the machine falls on every phase alike):
  1. learner alone: TD3 updates/s on a replay pre-filled with 50k transitions, no streamers
     (run right before every phase that trains with streamers, as its reference);
  2. ingest alone, per batch size: the learner loop only takes batches into replay and lets
     their acks go at once. An Insert is answered only once its record is fsync'd, so acked
     transitions/s is durable transitions/s; with fsyncs/s and MB/s written to the log;
  3. both, per batch size: the loop of edge_rl.loop.train (take batches, run a chunk of 50
     updates, let acks go) while the streamers stream: updates/s, transitions/s, and the
     learner's loss against the learner-alone run just before it;
  4. both, with the streamers paced to --paced total transitions/s (a fleet slower than
     the link), at --paced-batch;
  5. gRPC alone, paced like 4: the same streamers send the same Inserts, at the same pace,
     to a second gRPC server in this process whose Insert acks at once and does nothing
     else, while the learner trains. On two cores the streamers run on the learner's
     machine; this phase measures what the transport and the streamers cost the learner, so
     that 4 minus 5 is what edge-rl's ingest code adds.
Every phase also reports where the CPU went (learner loop, Insert's own code, grpcio's Python
around it, the fsync thread, the process's other threads, the streamer processes, and the
rest of the machine); a last table times the Insert handler's stages on one batch.

One script past ~400 lines, on purpose: its phases are measured side by side in one run
against one learner; the streamer and the learner side are its helper modules.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bench_common import cpu_model, table  # tools/, on the path as the script's folder
from ingest_learner_side import PREFILL, LearnerSide, build_learner_side, time_stages

from edge_rl.loop.train import UPDATES_PER_CHUNK

log = logging.getLogger("bench_ingest")

STREAMER = Path(__file__).resolve().parent / "ingest_streamer.py"
TICK = os.sysconf("SC_CLK_TCK")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="length of each phase in each round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of all phases, interleaved so that other load on the "
                             "machine falls on every phase alike; medians are reported")
    parser.add_argument("--actors", type=int, default=4, help="streamer processes")
    parser.add_argument("--window", type=int, default=8, help="inserts in flight per streamer")
    parser.add_argument("--batch-transitions", type=int, nargs="+", default=[1000],
                        help="transitions per batch; each value gets phases 2 and 3")
    parser.add_argument("--paced", type=float, nargs="*", default=[],
                        help="total transitions/s of the paced phases (4)")
    parser.add_argument("--paced-batch", type=int,
                        help="transitions per batch in the paced phases (default: the first "
                             "--batch-transitions)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--streamer-cpus", type=int, nargs="+", metavar="CPU",
                        help="pin the streamers to these CPUs (on a machine with cores to "
                             "spare, with the learner pinned elsewhere by taskset, this stands "
                             "in for actors on other machines)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--quick", action="store_true",
                        help="every kind of phase once, briefly: 1 round of 3 s (time for "
                             "several chunks of updates on a loaded machine), 1 streamer, "
                             "batches of 1000, one paced rate (CI runs it; ~50 s)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds, args.actors = 3.0, 1, 1
        args.batch_transitions, args.paced = [1000], [20_000.0]
    return args


# -- CPU accounting ------------------------------------------------------------------------------


def thread_cpu() -> dict[int, float]:
    """CPU seconds of each thread of this process, by native thread id (schedstat's
    nanoseconds on a CPU: /proc's utime and stime count 10 ms ticks, too coarse for a hundred
    mostly idle handler threads)."""
    seconds = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/schedstat") as f:
                seconds[int(task)] = int(f.read().split()[0]) / 1e9
        except OSError:  # the thread ended meanwhile
            continue
    return seconds


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:8]]  # not guest time: counted twice
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values) - idle) / TICK, sum(values) / TICK


def thread_groups() -> dict[int, str]:
    """Which part of the learner process each Python thread is; the rest are gRPC's and
    TensorFlow's own C++ threads."""
    groups = {threading.main_thread().native_id: "learner loop"}
    for thread in threading.enumerate():
        if thread.name.startswith(("grpc", "noop")):  # the servers' ThreadPoolExecutors
            groups[thread.native_id] = "Insert handlers"
        elif thread.name == "replay-log-sync":
            groups[thread.native_id] = "fsync thread"
    return groups


@dataclass
class Snapshot:
    """Counters read at one instant."""

    at: float
    threads: dict[int, float]
    machine: tuple[float, float]
    syncs: int
    bytes_written: int
    taken: int
    insert_cpu: float
    insert_calls: int


# -- the learner loop ----------------------------------------------------------------------------


@dataclass(eq=False)  # phases are compared and hashed by identity
class Phase:
    name: str
    batch: int = 0  # transitions per batch (0: no streamers)
    train: bool = False
    rate: float = 0.0  # total transitions/s the streamers are paced to (0: as fast as acked)
    noop: bool = False  # the streamers insert into the no-op server (phase 5)
    rounds: list[dict] = field(default_factory=list)  # summarize's result, one per round

    def median(self, key: str) -> float:
        return float(np.median([r[key] for r in self.rounds]))

    def median_cpu(self) -> dict[str, float]:
        names = self.rounds[0]["cpu_cores"]
        return {n: float(np.median([r["cpu_cores"][n] for r in self.rounds])) for n in names}


class Loop:
    """The learner's loop of edge_rl.loop.train, reduced to what ingest touches."""

    def __init__(self, side: LearnerSide):
        self.side = side
        self.training = side.training
        self.taken = 0  # transitions moved into replay
        self.updates = 0
        self.marks: list[tuple[float, int]] = []  # (time, updates) after every chunk
        self.sample_size = UPDATES_PER_CHUNK * side.training.config.batch_size

    def chunk(self) -> None:
        self.training.learner.train(self.training.replay.sample(self.sample_size),
                                    UPDATES_PER_CHUNK)
        self.updates += UPDATES_PER_CHUNK
        self.marks.append((time.time(), self.updates))

    def step(self, train: bool) -> None:
        """One pass: take what has arrived; acks go at once (this measures throughput, not
        edge_rl.loop.train's flow control, which holds them while the learner trails); then a
        chunk of updates if training. Batches arriving during a chunk wait for its end."""
        ingest = self.training.ingest
        for pending in ingest.take(block=not train):
            self.taken += len(pending.transitions)
        ingest.release_all()
        if train:
            self.chunk()

    def run(self, train: bool, until: float) -> None:
        next_forget = time.time() + 2.0
        while time.time() < until:
            self.step(train)
            if time.time() > next_forget:
                # Training frees log segments at checkpoints; here nothing needs them, and a
                # fast run would otherwise write gigabytes into the temp dir.
                ingest = self.training.ingest
                ingest.log.forget_before(ingest.position)
                next_forget = time.time() + 2.0

    def snapshot(self) -> Snapshot:
        log_ = self.training.ingest.log
        insert = self.side.insert
        return Snapshot(time.time(), thread_cpu(), machine_busy(), log_.syncs,
                        log_.bytes_written, self.taken, insert.cpu_seconds, insert.calls)

    def update_rate(self, start: float, end: float) -> float:
        """Updates/s between the first and the last chunk that ended inside [start, end]."""
        inside = [(t, u) for t, u in self.marks if start <= t <= end]
        if len(inside) < 2:
            return math.nan
        (t0, u0), (t1, u1) = inside[0], inside[-1]
        return (u1 - u0) / (t1 - t0)


def start_streamers(args: argparse.Namespace, side: LearnerSide, phase: Phase,
                    incarnation: int) -> list[subprocess.Popen]:
    """Spawn --actors streamers (fresh interpreters, never fork: this process holds TF and
    gRPC threads) and wait until each has said Hello."""
    per_actor_rate = phase.rate / args.actors if phase.rate else 0.0
    procs = []
    for i in range(args.actors):
        command = [sys.executable, str(STREAMER), "--learner", f"127.0.0.1:{side.port}",
                   "--actor-id", f"streamer-{i}", "--incarnation", str(incarnation),
                   "--batch-transitions", str(phase.batch), "--window", str(args.window),
                   "--rate", str(per_actor_rate), "--seed", str(args.seed + i)]
        if phase.noop:
            command += ["--insert-to", f"127.0.0.1:{side.noop_port}"]
        if args.streamer_cpus:
            command += ["--cpus", *map(str, args.streamer_cpus)]
        procs.append(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True))
    for proc in procs:
        line = proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            raise RuntimeError(f"a streamer failed to start (exit code {proc.poll()})")
    return procs


def run_phase(args: argparse.Namespace, loop: Loop, phase: Phase, incarnation: int) -> None:
    """Run one round of a phase for --seconds; its figures go to phase.rounds."""
    log.info("phase: %s", phase.name)
    procs = start_streamers(args, loop.side, phase, incarnation) if phase.batch else []
    start = time.time() + 0.5
    end = start + args.seconds
    for proc in procs:
        proc.stdin.write(json.dumps({"start": start, "end": end}) + "\n")
        proc.stdin.flush()
    # Counters are read at the window's edges by a thread that only sleeps, so the loop
    # itself runs exactly as it would without the benchmark around it.
    snapshots: list[Snapshot] = []

    def watch() -> None:
        for edge in (start, end):
            time.sleep(max(0.0, edge - time.time()))
            snapshots.append(loop.snapshot())

    watcher = threading.Thread(target=watch, name="bench-watch")
    watcher.start()
    loop.run(phase.train, until=end)
    # The streamers wait out their in-flight inserts after the end: keep acking until they go.
    while any(proc.poll() is None for proc in procs):
        loop.step(train=False)
    watcher.join()
    reports = [json.loads(proc.stdout.read().strip().splitlines()[-1]) for proc in procs]
    for report in reports:
        if report["error"]:
            raise RuntimeError(f"a streamer's insert failed: {report['error']}")
        if report["tensorflow_imported"]:
            raise RuntimeError("a streamer imported TensorFlow")
    phase.rounds.append(summarize(loop, phase, snapshots, reports))


def summarize(loop: Loop, phase: Phase, snapshots: list[Snapshot],
              reports: list[dict]) -> dict:
    first, last = snapshots
    seconds = last.at - first.at
    groups = thread_groups()
    by_group: dict[str, float] = {}
    for tid, used in last.threads.items():
        group = groups.get(tid, "other threads")
        by_group[group] = by_group.get(group, 0.0) + used - first.threads.get(tid, 0.0)
    inside_insert = last.insert_cpu - first.insert_cpu
    busy = (last.machine[0] - first.machine[0]) / (last.machine[1] - first.machine[1])
    cpu = {
        "learner loop": by_group.get("learner loop", 0.0),
        "inside Insert": inside_insert,
        # the handler threads' other time: grpcio's Python receiving and answering the call
        "gRPC Python around Insert": by_group.get("Insert handlers", 0.0) - inside_insert,
        "fsync thread": by_group.get("fsync thread", 0.0),
        "other threads (gRPC core, TF)": by_group.get("other threads", 0.0),
        "streamers": sum(r["cpu_seconds"] for r in reports),
    }
    # Whatever else ran on the machine meanwhile: other processes, the kernel's own threads.
    cpu["rest of the machine"] = busy * os.cpu_count() * seconds - sum(cpu.values())
    acked = sum(r["acked_transitions"] for r in reports)
    return {
        "seconds": seconds,
        "transitions_per_s": acked / seconds,
        "taken_per_s": (last.taken - first.taken) / seconds,
        "updates_per_s": loop.update_rate(first.at, last.at) if phase.train else math.nan,
        "inserts_per_s": (last.insert_calls - first.insert_calls) / seconds,
        "fsyncs_per_s": (last.syncs - first.syncs) / seconds,
        "log_mb_per_s": (last.bytes_written - first.bytes_written) / seconds / 1e6,
        "ack_ms_p50": float(np.median([r["ack_latency_ms_p50"] for r in reports]))
        if reports else math.nan,
        "ack_ms_p99": max(r["ack_latency_ms_p99"] for r in reports) if reports else math.nan,
        "cpu_cores": {name: used / seconds for name, used in cpu.items()},
        "machine_busy": busy,
    }


# -- the report ----------------------------------------------------------------------------------


def learner_loss(phase: Phase) -> list[float]:
    """The learner's loss in each round against the learner-alone run just before it."""
    return [1 - r["updates_per_s"] / r["alone_updates_per_s"] for r in phase.rounds]


def report(args: argparse.Namespace, phases: list[Phase], stages: dict[int, dict],
           machine: dict) -> None:
    alone = phases[0]
    print(f"{machine['cpu']}, {machine['cores']} cores; {args.actors} streamers x "
          f"{args.window} in flight; {args.rounds} rounds of {args.seconds:.0f} s per phase "
          f"(medians); TD3 HalfCheetah-v5 (batch 256, chunks of {UPDATES_PER_CHUNK}); "
          f"{machine['wall_s']:.0f} s in all\n")
    print("### Ingest and learner, side by side\n")
    rows = []
    for p in phases:
        streams, loss = bool(p.batch), "-"
        if p.train and p.batch:
            losses = learner_loss(p)
            loss = (f"{100 * np.median(losses):.0f}% "
                    f"({100 * min(losses):.0f} to {100 * max(losses):.0f}%)")
        rows.append([
            p.name,
            f"{p.median('transitions_per_s'):,.0f}" if streams else "-",
            f"{p.median('updates_per_s'):.0f}" if p.train else "-",
            loss,
            # the no-op Insert counts no calls and writes no log
            f"{p.median('inserts_per_s'):,.0f}" if streams and not p.noop else "-",
            f"{p.median('fsyncs_per_s'):.0f}" if streams and not p.noop else "-",
            f"{p.median('log_mb_per_s'):.1f}" if streams and not p.noop else "-",
            f"{p.median('ack_ms_p50'):.0f} / {p.median('ack_ms_p99'):.0f}" if streams else "-",
        ])
    print(table(["phase", "transitions/s durable (acked)", "updates/s",
                 "learner loss (range over rounds)", "Inserts/s", "fsyncs/s", "log MB/s",
                 "ack ms p50 / p99"], rows))
    print("\n### Where the CPU went (cores busy during the phase; the machine has "
          f"{machine['cores']})\n")
    names = list(alone.median_cpu())
    rows = [[p.name] + [f"{used:.2f}" for used in p.median_cpu().values()]
            + [f"{p.median('machine_busy'):.0%}"] for p in phases]
    print(table(["phase"] + names + ["machine busy"], rows))
    print("\n### Insert handler stages (median µs per batch, one thread, nothing else running)\n")
    sizes = list(stages)
    rows = [[stage] + [f"{stages[n][stage]:.0f} ({stages[n][stage] / n:.2f}/transition)"
                       for n in sizes] for stage in stages[sizes[0]]]
    print(table(["stage"] + [f"batch of {n}" for n in sizes], rows))


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    began = time.perf_counter()
    log.info("building the learner (TensorFlow import, TD3, %d-transition replay)", PREFILL)
    side = build_learner_side(args)
    loop = Loop(side)
    for _ in range(3):  # traces the chunk's graph: the first call takes seconds
        loop.chunk()
    # Every phase that trains with streamers runs right after a learner-alone run, its
    # reference: load from outside the benchmark then falls on both alike.
    alone = Phase("learner alone", train=True)
    schedule = []
    for n in args.batch_transitions:
        schedule += [Phase(f"ingest alone, batches of {n}", batch=n), alone,
                     Phase(f"both, batches of {n}", batch=n, train=True)]
    for rate in args.paced:
        n = args.paced_batch or args.batch_transitions[0]
        schedule += [alone, Phase(f"both, paced to {rate:,.0f}/s, batches of {n}", batch=n,
                                  train=True, rate=rate),
                     alone, Phase(f"gRPC alone (no-op Insert), paced to {rate:,.0f}/s, "
                                  f"batches of {n}", batch=n, train=True, rate=rate, noop=True)]
    incarnation = 0  # each run's streamers are new actor incarnations
    for round_ in range(args.rounds):
        log.info("round %d of %d", round_ + 1, args.rounds)
        for phase in schedule:
            incarnation += 1
            run_phase(args, loop, phase, incarnation)
            if phase.train and phase.batch:
                phase.rounds[-1]["alone_updates_per_s"] = alone.rounds[-1]["updates_per_s"]
    phases = [alone] + [p for p in dict.fromkeys(schedule) if p is not alone]
    stages = {n: time_stages(side, n, repeats=max(50, 20_000 // n))
              for n in args.batch_transitions}
    side.close()
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(),
               "wall_s": time.perf_counter() - began}
    report(args, phases, stages, machine)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"phases": [{"name": p.name, "rounds": p.rounds} for p in phases], "stages": stages,
             "machine": machine}, indent=2))


if __name__ == "__main__":
    main()
