"""Where a loop's time goes, and what its CPU time cost in energy (base install only).

Both sides use these: an actor splits its loop into inference, env and transport and reports
each batch's share; the learner splits its own loop the same way. Energy here is an estimate
from CPU seconds: a machine without power counters (most VMs, every Raspberry Pi) offers
nothing better, and it scales with the work done, not with wall-clock time.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

# Power drawn per busy core when nothing measures it. A server core at full load draws
# ~4-7 W (TDP over cores) plus its share of memory and uncore; 10 W rounds that up. A
# Raspberry Pi 4 core is nearer 1.5 W: pass --cpu-watts there.
DEFAULT_CPU_WATTS = 10.0
ACTOR_PARTS = ("inference", "env", "transport")  # an actor's loop, as its batches report it
LEARNER_PARTS = ("updates", "publishing", "evaluation", "checkpoints", "ingest",
                 "waiting_for_actors", "topology")  # the learner's loop (edge_rl.loop.train)


def cpu_method(watts_per_core: float) -> str:
    """The label an estimate from CPU seconds carries into reports."""
    return f"cpu-seconds x {watts_per_core:g} W/core"


class TimeSplit:
    """Seconds spent in the named parts of a loop."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self._last_lap = time.perf_counter()

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - began

    def lap(self, name: str) -> None:
        """Charge the time since the previous lap (or since this TimeSplit was made) to
        `name`: one clock read, for loops too hot for a context manager per part."""
        now = time.perf_counter()
        self.seconds[name] += now - self._last_lap
        self._last_lap = now

    def take(self) -> dict[str, float]:
        """The seconds since the last take, by part; starts over."""
        taken = dict(self.seconds)
        self.seconds.clear()
        return taken


class ProcessEnergy:
    """This process's CPU seconds since the last take, and their energy at a fixed power per
    busy core."""

    def __init__(self, watts_per_core: float = DEFAULT_CPU_WATTS):
        self.watts_per_core = float(watts_per_core)
        self.method = cpu_method(self.watts_per_core)
        self._last = time.process_time()

    def take(self) -> tuple[float, float]:
        """(joules, cpu seconds) since the last take."""
        now = time.process_time()
        cpu_seconds, self._last = now - self._last, now
        return cpu_seconds * self.watts_per_core, cpu_seconds


def seconds_since_process_start() -> float | None:
    """Wall-clock seconds since this process was started (from /proc, to one clock tick,
    about 10 ms; the interpreter's own start-up included); None where /proc does not tell."""
    try:
        with open("/proc/self/stat") as f:
            # field 22, counted after the command name (which may hold spaces) closes: the
            # start in clock ticks since boot, on the clock CLOCK_BOOTTIME reads
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
