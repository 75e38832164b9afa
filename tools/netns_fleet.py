"""A learner and two actors on separate network hosts: cut one actor's link, bring it back.

Three network namespaces stand in for three machines, joined by veth pairs:

    actor 1 (10.231.1.2/30) ──veth── learner (10.231.1.1/30, 10.231.2.1/30) ──veth── actor 2
                                                                           (10.231.2.2/30)

The learner serves on 0.0.0.0 with a token; each actor reaches it over its own link. Once both
actors' batches are acked, actor 1's end of its link goes down for `--outage` seconds (a cable
pulled: no RST, no FIN, nothing). The script checks that actor 1 notices ("lost the learner"),
keeps acting into its spool, reconnects when the link is back ("learner back") and delivers
what it spooled, while actor 2 goes on undisturbed. Finally everything is stopped (the actors
the learner first, whose last heartbeats stop the actors; --stop-actors-first tries the other
order) and the learner's last
checkpoint's ledger of inserted (actor id, seq) must equal the union of what the actors logged
as acked: nothing acked was lost, nothing was inserted twice.

    sudo python tools/netns_fleet.py [--outage 20] [--workdir DIR] [--keep] [--stop-actors-first]

Exit codes: 0 all checks passed, 1 a check failed (the logs' folder is printed), 77 this
machine cannot run it (not root, no `ip`, namespaces not permitted): one line "skipped: why".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from netns import (
    EDGE_RL,
    CheckFailed,
    Fleet,
    Skip,
    build_network,
    ip,
    preflight,
    stop,
    wait_for,
    wait_or_kill,
)

from edge_rl.device.spool import read_acked
from edge_rl.transport.exchange import Ledger

log = logging.getLogger("netns_fleet")

EXIT_SKIP = 77  # what automake and friends use for "this test cannot run here"
# Larger batches than the default 64 transitions and a wider in-flight window: what actor 1
# spools during the outage is resent in fewer round trips, which keeps the run short.
BATCH_TRANSITIONS = 256
WINDOW = 8  # the learner's --max-in-flight: unacked batches an actor may have in flight


# -- small helpers ----------------------------------------------------------------------------


def spooled(spool: Path) -> set[int]:
    """Seqs of the batches an actor holds unacked (its spool's batch files)."""
    return {int(p.stem) for p in (spool / "batches").glob("*.batch")}


def text_after(path: Path, offset: int) -> str:
    """A log's text from byte `offset` on (what it said since a given moment)."""
    if not path.is_file():
        return ""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


# -- the experiment ---------------------------------------------------------------------------


def learner_status(learner_ns: str, port: int, token_file: Path) -> dict[str, Any]:
    """`edge-rl status --json` from inside the learner's namespace (the learner listens on
    0.0.0.0, so loopback reaches it there)."""
    result = subprocess.run(
        ["ip", "netns", "exec", learner_ns, str(EDGE_RL), "status", f"127.0.0.1:{port}",
         "--token-file", str(token_file), "--json"],
        capture_output=True, text=True, timeout=60,
    )
    if result.returncode != 0:
        raise CheckFailed(f"edge-rl status failed: {result.stderr.strip()}")
    return json.loads(result.stdout)


def inserted(status: dict[str, Any], actor_id: str) -> int:
    """Batches of `actor_id` in the learner's ledger (uint64 fields are strings in JSON)."""
    rows = [a for a in status["actors"] if a["actor_id"] == actor_id]
    return int(rows[0]["batches_inserted"]) if rows else 0


def stop_actors_first(fleet: Fleet, actors: list[str]) -> tuple[int, dict[str, int], list[str]]:
    """SIGINT the actors (their Ctrl-C path waits, link up, for the acks of what they have in
    flight), then SIGTERM the learner (final checkpoint). Nothing is in flight when the
    learner stops, so every batch in its ledger had its ack recorded by its actor."""
    for actor in actors:  # both at once; one SIGINT each (a second would cut the wait short)
        fleet.processes[actor].send_signal(signal.SIGINT)
    codes = {actor: wait_or_kill(fleet.processes[actor], timeout=20) for actor in actors}
    return stop(fleet.processes["learner"], signal.SIGTERM, timeout=90), codes, []


def stop_learner_first(fleet: Fleet, actors: list[str]) -> tuple[int, dict[str, int], list[str]]:
    """SIGTERM the learner first: it acks what is in replay, keeps serving until each actor's
    heartbeat has heard the stop (at most 5 s), and writes a final checkpoint. The actors must
    exit by themselves; any still running 10 s later get SIGINT and fail the check."""
    learner_code = stop(fleet.processes["learner"], signal.SIGTERM, timeout=90)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(fleet.processes[a].poll() is None for a in actors):
        time.sleep(0.25)
    stopped = [a for a in actors if fleet.processes[a].poll() is not None]
    codes = {actor: stop(fleet.processes[actor], signal.SIGINT, timeout=20) for actor in actors}
    return learner_code, codes, stopped


def final_ledger(run_dir: Path) -> set[tuple[str, int]]:
    """(actor id, seq) pairs in the replay of the run's latest checkpoint."""
    checkpoints = run_dir / "checkpoints"
    folder = checkpoints / (checkpoints / "latest").read_text().strip()
    return Ledger(json.loads((folder / "state.json").read_text())["ledger"]).pairs()


def run(args: argparse.Namespace, fleet: Fleet) -> dict[str, Any]:
    """The experiment; returns the figures for the report, raises CheckFailed on a failure."""
    started = time.monotonic()
    learner_ns, links = build_network(fleet, f"erl{os.getpid()}")
    token_file = fleet.workdir / "token"
    token_file.write_text(secrets.token_hex(16) + "\n")
    run_dir = fleet.workdir / "run"
    spools = {f"actor-{i}": fleet.workdir / f"spool-{i}" for i in (1, 2)}

    # A steps budget the run never reaches: the script stops the learner itself once the
    # checks are done. Few updates per step and no evaluations keep the learner from being
    # the bottleneck on 2 cores, so the actors' pace (and the outage's spool) is the network's.
    fleet.start("learner", learner_ns, [
        "learner", "--env", "CartPole-v1", "--algo", "dqn", "--host", "0.0.0.0",
        "--port", args.port, "--token-file", token_file, "--out", run_dir,
        "--steps", 10_000_000, "--seed", 0, "--updates-per-step", 0.05,
        "--eval-every", 10**9, "--eval-episodes", 2, "--checkpoint-every", 10**9,
        "--batch-transitions", BATCH_TRANSITIONS, "--max-in-flight", WINDOW,
    ])
    for i, link in enumerate(links, start=1):
        fleet.start(f"actor-{i}", link.actor_ns, [
            "actor", "--learner", f"{link.learner_addr}:{args.port}", "--token-file", token_file,
            "--spool", spools[f"actor-{i}"], "--actor-id", f"actor-{i}",
        ])

    # 1. Both actors deliver over their own links (the learner's start-up, TensorFlow
    # included, is most of this wait).
    wait_for(lambda: all(len(read_acked(s)) >= 5 for s in spools.values()), 120,
             "both actors' first acked batches", fleet)
    before = learner_status(learner_ns, args.port, token_file)
    before_time = time.monotonic()
    log.info("both actors delivering after %.1f s (%s env steps)",
             before_time - started, before["env_steps"])

    # 2. Pull actor 1's cable. Its own end goes down: the learner's end loses carrier, and
    # nothing (no RST, no FIN) tells either side; keepalives and timeouts must find out.
    spool1, log1 = spools["actor-1"], fleet.log_path("actor-1")
    log_offset = size(log1)
    inserted1_at_cut = inserted(learner_status(learner_ns, args.port, token_file), "actor-1")
    ip("-n", links[0].actor_ns, "link", "set", links[0].actor_dev, "down")
    cut = time.monotonic()
    # Snapshots right after the cut: from here on only acks already on their way can land.
    acked1_at_cut = set(read_acked(spool1))
    acked2_at_cut = len(read_acked(spools["actor-2"]))
    spooled_at_cut = spooled(spool1)
    log.info("actor 1's link down (%d batches in its spool)", len(spooled_at_cut))

    wait_for(lambda: "lost the learner" in text_after(log1, log_offset), args.outage,
             "actor 1 to log 'lost the learner' while its link is down", fleet)
    noticed_after = time.monotonic() - cut
    # Hold the outage for its full length, watching the spool (never a process dying).
    wait_for(lambda: time.monotonic() - cut >= args.outage, args.outage + 5,
             "the outage to last", fleet, poll=0.5)
    during_status = learner_status(learner_ns, args.port, token_file)
    spooled_at_up = spooled(spool1)
    new_in_outage = spooled_at_up - spooled_at_cut - acked1_at_cut
    # Connected, an actor holds at most its in-flight window unacked; far more in the
    # spool, and no more acks during the outage than were on their way at the cut, say the
    # cut really cut it off.
    acked1_during = len(set(read_acked(spool1)) - acked1_at_cut)
    if len(spooled_at_up) <= max(WINDOW, len(spooled_at_cut)) or acked1_during > WINDOW:
        raise CheckFailed(f"actor 1 was not cut off: its spool went from {len(spooled_at_cut)} "
                          f"to {len(spooled_at_up)} batches, {acked1_during} acked during the "
                          f"outage\n{fleet.tails()}")
    acked2_during = len(read_acked(spools["actor-2"])) - acked2_at_cut
    if acked2_during <= 0:
        raise CheckFailed(f"actor 2 delivered nothing while actor 1 was cut off\n{fleet.tails()}")
    row1 = next(a for a in during_status["actors"] if a["actor_id"] == "actor-1")
    silent, gone = float(row1["seconds_since_seen"]), bool(row1["gone"])

    # 3. Plug it back in: actor 1 must say Hello again and deliver what it spooled.
    ip("-n", links[0].actor_ns, "link", "set", links[0].actor_dev, "up")
    up = time.monotonic()
    outage = up - cut
    log.info("actor 1's link up after %.1f s (%d batches spooled, %d new during the outage)",
             outage, len(spooled_at_up), len(new_in_outage))
    back = wait_for(
        lambda: re.search(r"learner back after ([\d.]+) s; (\d+) batches spooled",
                          text_after(log1, log_offset)),
        60, "actor 1 to log 'learner back'", fleet)
    reconnected_after = time.monotonic() - up
    wait_for(lambda: spooled_at_up <= set(read_acked(spool1)), 60,
             "the batches actor 1 spooled during the outage to be acked", fleet)
    delivered_after = time.monotonic() - up
    after = learner_status(learner_ns, args.port, token_file)
    after_time = time.monotonic()
    inserted1_after = inserted(after, "actor-1")
    if inserted1_after < inserted1_at_cut + len(new_in_outage):
        raise CheckFailed(f"the learner's inserted count for actor 1 went from "
                          f"{inserted1_at_cut} to {inserted1_after}, not up by at least "
                          f"{len(new_in_outage)}\n{fleet.tails()}")

    # 4. Stop, once actor 1 has caught up (no backlog left beyond its in-flight window): an
    # actor stopped with a backlog leaves batches in flight that the learner may insert
    # without the actor ever hearing the ack, and the ledger check below would fail on a
    # batch that is not lost (the actor keeps it and would resend it).
    wait_for(lambda: len(spooled(spool1)) <= WINDOW, 60,
             "actor 1 to catch up (its spool back within the in-flight window)", fleet)
    if args.stop_actors_first:
        learner_code, actor_codes, stopped_by_learner = stop_actors_first(fleet, list(spools))
    else:
        learner_code, actor_codes, stopped_by_learner = stop_learner_first(fleet, list(spools))
    if not args.stop_actors_first and sorted(stopped_by_learner) != sorted(spools):
        raise CheckFailed(f"only {stopped_by_learner} heard the learner's stop")
    if learner_code != 0 or any(actor_codes.values()):
        raise CheckFailed(f"exit codes: learner {learner_code}, actors {actor_codes}\n"
                          f"{fleet.tails()}")

    # 5. The ledger of the final checkpoint is what the actors logged as acked, exactly.
    ledger = final_ledger(run_dir)
    union: set[tuple[str, int]] = set()
    acked_counts = {}
    for actor_id, spool in spools.items():
        seqs = read_acked(spool)
        if len(seqs) != len(set(seqs)):
            raise CheckFailed(f"{actor_id} logged an ack twice: {len(seqs)} lines, "
                              f"{len(set(seqs))} distinct seqs")
        union |= {(actor_id, s) for s in seqs}
        acked_counts[actor_id] = len(seqs)
    if ledger != union:
        raise CheckFailed(f"ledger and acks differ: in the ledger but never acked "
                          f"{sorted(ledger - union)[:5]} ({len(ledger - union)}); acked but "
                          f"not in the ledger {sorted(union - ledger)[:5]} "
                          f"({len(union - ledger)})")
    if not {("actor-1", s) for s in spooled_at_up} <= ledger:
        raise CheckFailed("batches actor 1 spooled during the outage are missing from the "
                          "final ledger")

    steps = int(after["env_steps"]) - int(before["env_steps"])
    return {
        "outage_s": outage,
        "noticed_after_s": noticed_after,
        "learner_saw_actor1_silent_s": silent,
        "learner_marked_gone": gone,
        "spooled_at_cut": len(spooled_at_cut),
        "spooled_at_link_up": len(spooled_at_up),
        "new_in_outage": len(new_in_outage),
        "actor2_acked_during_outage": acked2_during,
        "actor_reported_down_s": float(back.group(1)),
        "actor_reported_to_resend": int(back.group(2)),
        "reconnected_after_s": reconnected_after,
        "delivered_after_s": delivered_after,
        "inserted_actor1": (inserted1_at_cut, inserted1_after),
        "steps_per_s": steps / (after_time - before_time),
        "env_steps": int(after["env_steps"]),
        "acked": acked_counts,
        "ledger": len(ledger),
        "stop_order": "actors first" if args.stop_actors_first else "learner first",
        "stopped_by_learner": stopped_by_learner,
        "total_s": time.monotonic() - started,
    }


def report(figures: dict[str, Any]) -> None:
    f = figures
    lines = [
        "netns fleet: learner + 2 actors in 3 network namespaces over veth",
        f"  outage of actor 1's link  {f['outage_s']:.1f} s; it logged 'lost the learner' "
        f"{f['noticed_after_s']:.1f} s after the cut; just before the link came back the "
        f"learner had not heard from it for {f['learner_saw_actor1_silent_s']:.1f} s"
        f"{' (marked gone)' if f['learner_marked_gone'] else ''}",
        f"  spooled during outage     {f['new_in_outage']} new batches (spool {f['spooled_at_cut']}"
        f" -> {f['spooled_at_link_up']}); actor 2 had {f['actor2_acked_during_outage']} "
        "batches acked meanwhile",
        f"  after the link came back  'learner back' in {f['reconnected_after_s']:.1f} s "
        f"(actor: down {f['actor_reported_down_s']:.1f} s, {f['actor_reported_to_resend']} to "
        f"resend); all spooled batches acked in {f['delivered_after_s']:.1f} s",
        f"  learner                   actor 1 inserted {f['inserted_actor1'][0]} -> "
        f"{f['inserted_actor1'][1]} batches; took {f['steps_per_s']:.0f} env steps/s from "
        f"both actors over the experiment, {f['env_steps']} env steps in all",
        f"  final ledger              {f['ledger']} batches == acked logs "
        f"({', '.join(f'{a}: {n}' for a, n in f['acked'].items())}), no duplicates",
        f"  stopped                   {f['stop_order']}"
        + (f"; stopped by the learner's heartbeat: "
           f"{', '.join(f['stopped_by_learner']) or 'none (SIGINT)'}"
           if f["stop_order"] == "learner first" else ""),
        f"  total                     {f['total_s']:.1f} s",
    ]
    print("\n".join(lines), flush=True)


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outage", type=float, default=20.0,
                        help="seconds actor 1's link stays down (default 20: longer than the "
                             "actors' 5 s heartbeat timeout and 15 s keepalive detection)")
    parser.add_argument("--port", type=int, default=50051,
                        help="the learner's port (its namespace has the port space to itself)")
    parser.add_argument("--workdir", type=Path,
                        help="folder for logs, spools and the run (default: a temp folder, "
                             "deleted after a passing run)")
    parser.add_argument("--keep", action="store_true", help="keep the workdir after a pass")
    parser.add_argument("--stop-actors-first", action="store_true",
                        help="stop the actors (Ctrl-C) before the learner, instead of letting "
                             "the learner's heartbeat replies stop them")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")

    try:
        preflight()
    except Skip as why:
        print(f"skipped: {why}", flush=True)
        return EXIT_SKIP
    except CheckFailed as err:
        print(f"FAILED: {err}", flush=True)
        return 1

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="netns-fleet-"))
    workdir.mkdir(parents=True, exist_ok=True)
    fleet = Fleet(workdir)
    # SIGTERM (a CI timeout, say) takes the same way out as Ctrl-C: through `finally`, so no
    # namespace or process outlives the script.
    signal.signal(signal.SIGTERM, interrupt)
    code = 1
    try:
        report(run(args, fleet))
        code = 0
    except Skip as why:
        print(f"skipped: {why}", flush=True)
        code = EXIT_SKIP
    except CheckFailed as err:
        print(f"FAILED: {err}", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        code = 130
    finally:
        # A second Ctrl-C must not cut the clean-up short (each step of it has a timeout).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        fleet.teardown()
    if code in (0, EXIT_SKIP) and args.workdir is None and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    elif code != EXIT_SKIP:
        print(f"logs, spools and the run are in {workdir}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
