"""What a run costs: where the learner's and the actors' time goes, its energy and its CO2.

Energy is one figure per machine, never one per process (a tracker in every process would
count the whole machine once per process):

- the learner's machine: codecarbon's tracker (machine mode) where the kernel exposes RAPL
  power counters; otherwise the CPU seconds of the run's processes on this machine (the
  learner and the local actors it started, read with psutil) times a power per busy core,
  plus what NVIDIA GPUs' own energy counters say, where there are any. codecarbon 2.5
  without RAPL would assume a constant half of an assumed TDP, an energy that only follows
  wall-clock time: not used.
- remote actors: each reports its own CPU-seconds estimate with its batches; the learner
  adds up the batches it accepts, so each report counts once.

CO2 is energy times the grid's carbon intensity for --country, from codecarbon's offline
table (no network), or the table's world average.
"""

from __future__ import annotations

import glob
import logging
import os
import socket
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from edge_rl.device.accounting import ACTOR_PARTS, LEARNER_PARTS, TimeSplit, cpu_method
from edge_rl.device.errors import UserError
from edge_rl.device.wire import BatchCosts

log = logging.getLogger(__name__)

JOULES_PER_KWH = 3.6e6


@contextmanager
def quiet_imports() -> Iterator[None]:
    """codecarbon 2.5 and its pynvml warn about their own dependencies on import (pkg_resources,
    nvidia-ml-py): nothing a user of edge-rl can act on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def carbon_intensity(country: str | None) -> tuple[float, str]:
    """(grams of CO2 per kWh, where the figure comes from) for an ISO 3166 alpha-3 code, or
    the world average (weighted by each country's electricity) when `country` is None."""
    with quiet_imports():
        from codecarbon.input import DataSource

    mix = DataSource().get_global_energy_mix_data()
    if country is None:
        total = sum(row["total_TWh"] for row in mix.values())
        grams = sum(row["carbon_intensity"] * row["total_TWh"] for row in mix.values()) / total
        return grams, f"world average of codecarbon's {len(mix)} countries"
    row = mix.get(country.upper())
    if row is None:
        raise UserError(f"--country {country!r} is not in codecarbon's table; use an ISO 3166 "
                        f"alpha-3 code such as {', '.join(sorted(mix)[:6])}, ...")
    return float(row["carbon_intensity"]), f"{row['country_name']} ({row['year']})"


def rapl_readable() -> bool:
    return any(os.access(path, os.R_OK)
               for path in glob.glob("/sys/class/powercap/intel-rapl:*/energy_uj"))


class GpuEnergy:
    """NVIDIA GPUs' cumulative energy counters (NVML), in joules since start."""

    def __init__(self):
        self.handles, self.start = [], 0.0
        try:
            with quiet_imports():
                import pynvml

            pynvml.nvmlInit()
            self.pynvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                            for i in range(pynvml.nvmlDeviceGetCount())]
            self.start = self._millijoules()
        except Exception:  # no driver, no GPU, or a GPU without the counter
            self.handles = []

    def _millijoules(self) -> float:
        return float(sum(self.pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
                         for h in self.handles))

    def joules(self) -> float:
        if not self.handles:
            return 0.0
        try:
            return (self._millijoules() - self.start) / 1000.0
        except Exception:
            return 0.0


class MachineEnergy:
    """Energy of the learner's machine (or of the run's processes on it) since start."""

    def __init__(self, watts_per_core: float):
        import psutil

        self.watts_per_core = watts_per_core
        self.process = psutil.Process()
        self.tracker = None
        if rapl_readable():
            with quiet_imports():
                from codecarbon import OfflineEmissionsTracker

            # the country only matters for codecarbon's own CO2 figure, which is not used
            self.tracker = OfflineEmissionsTracker(
                country_iso_code="USA", tracking_mode="machine", save_to_file=False,
                log_level="error", measure_power_secs=5)
            self.tracker.start()
            self.method = "codecarbon (RAPL, machine)"
            self.gpu = None
        else:
            self.gpu = GpuEnergy()
            self.method = cpu_method(watts_per_core) + (" + NVML GPU" if self.gpu.handles else "")
        self._cpu_start = self._own_and_reaped()

    def _own_and_reaped(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system + times.children_user + times.children_system

    def cpu_seconds(self) -> float:
        """CPU seconds of this process and its descendants since start: live children are
        read directly; ended ones are in children_user/system once reaped."""
        live = 0.0
        for child in self.process.children(recursive=True):
            try:
                times = child.cpu_times()
                live += times.user + times.system
            except Exception:  # it ended meanwhile
                continue
        return self._own_and_reaped() - self._cpu_start + live

    def joules(self) -> float:
        if self.tracker is not None:
            # codecarbon 2.5 (pinned) has no public "energy so far" that does not also persist
            # a report: measure now and read its running total
            self.tracker._measure_power_and_energy()
            return float(self.tracker._total_energy.kWh) * JOULES_PER_KWH
        return self.cpu_seconds() * self.watts_per_core + self.gpu.joules()

    def stop(self) -> None:
        if self.tracker is not None:
            self.tracker.stop()

    @property
    def whole_machine(self) -> bool:
        """Whether the figure covers everything on the machine (other actors on it too)."""
        return self.tracker is not None


class RunCosts:
    """Time by part on both sides and energy, summed over the run's sessions (resumes)."""

    def __init__(self, carbon: bool, country: str | None, watts_per_core: float):
        self.learner = TimeSplit()  # this session's learner loop
        self.restore({})
        self.machine = None
        if carbon:
            self.intensity, self.intensity_source = carbon_intensity(country)
            self.country = country
            self.machine = MachineEnergy(watts_per_core)
            log.info("energy: %s; carbon intensity %.0f g/kWh (%s)", self.machine.method,
                     self.intensity, self.intensity_source)
        self.hostname = socket.gethostname()

    def restore(self, saved: dict[str, Any]) -> None:
        """Go on from a checkpoint's `state()` (earlier sessions' totals)."""
        self.learner_before = dict(saved.get("learner", {}))
        self.actors = dict(saved.get("actors", {}))  # actor-seconds, all sessions
        self.remote_joules = float(saved.get("remote_joules", 0.0))
        self.remote_methods = set(saved.get("remote_methods", []))
        self.machine_joules_before = float(saved.get("machine_joules", 0.0))

    def add_batch(self, costs: BatchCosts, actor_host: str) -> None:
        """An accepted batch's report (each batch is accepted once)."""
        for part, seconds in costs.times.items():
            self.actors[part] = self.actors.get(part, 0.0) + seconds
        if not costs.energy_method or self.machine is None:
            return
        if self.machine.whole_machine and actor_host == self.hostname:
            return  # on this machine: its power is in the machine's figure already
        self.remote_joules += costs.joules
        self.remote_methods.add(costs.energy_method)

    def learner_seconds(self) -> dict[str, float]:
        return {part: self.learner_before.get(part, 0.0) + self.learner.seconds.get(part, 0.0)
                for part in LEARNER_PARTS}

    def machine_joules(self) -> float:
        return self.machine_joules_before + (self.machine.joules() if self.machine else 0.0)

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps, so that a resumed run goes on adding."""
        return {
            "learner": self.learner_seconds(),
            "actors": dict(self.actors),
            "remote_joules": self.remote_joules,
            "remote_methods": sorted(self.remote_methods),
            "machine_joules": self.machine_joules(),
        }

    def time_breakdown(self) -> dict[str, dict[str, float]]:
        return {
            "learner": {k: round(v, 3) for k, v in self.learner_seconds().items()},
            "actors": {part: round(self.actors.get(part, 0.0), 3) for part in ACTOR_PARTS},
        }

    def energy(self) -> dict[str, Any] | None:
        if self.machine is None:
            return None
        machine = self.machine_joules()
        joules = machine + self.remote_joules
        kwh = joules / JOULES_PER_KWH
        method = f"learner machine: {self.machine.method}"
        if self.remote_methods:
            method += f"; remote actors: {', '.join(sorted(self.remote_methods))}"
        return {
            "joules": round(joules, 1),
            "kwh": kwh,
            "emissions_kg": kwh * self.intensity / 1000.0,
            "method": method,
            "country": self.country,
            "carbon_intensity_g_per_kwh": round(self.intensity, 1),
            "carbon_intensity_source": self.intensity_source,
            "learner_machine_joules": round(machine, 1),
            "remote_actors_joules": round(self.remote_joules, 1),
        }

    def scalars(self) -> dict[str, float]:
        """TensorBoard's view: cumulative energy, CO2 and seconds per part."""
        values = {f"time/learner_{k}_s": v for k, v in self.learner_seconds().items()}
        values.update({f"time/actors_{k}_s": v for k, v in self.actors.items()})
        energy = self.energy()
        if energy is not None:
            values["energy/kwh"] = energy["kwh"]
            values["energy/co2_g"] = energy["emissions_kg"] * 1000.0
        return values

    def stop(self) -> None:
        if self.machine is not None:
            self.machine.stop()
