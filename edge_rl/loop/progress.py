"""How far a run is, for the people watching it: its clock, its TensorBoard scalars and the
progress bar.

Nothing here changes what the loop does; the loop tells these what happened.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from edge_rl.config import TrainConfig
from edge_rl.device.accounting import seconds_since_process_start
from edge_rl.runs.costs import RunCosts
from edge_rl.runs.run_state import RunState

LOG_SECONDS = 2.0  # between the rates in TensorBoard (and the loop's look at its actors)


class RunClock:
    """Wall-clock seconds of a run over all its sessions, this session's update rate and when
    its first events happened (summary.json's "startup")."""

    def __init__(self):
        self.startup: dict[str, float] = {}  # event -> seconds since the process started
        self.before = 0.0  # the run's seconds in earlier sessions (a resumed run's)
        self.started: float | None = None  # when this session's loop began
        self.first_update: tuple[float, int] | None = None  # (time, updates) this session
        self.loop_update_rate: float | None = None  # this session's updates/s, once it ends

    def mark(self, event: str) -> None:
        """Note when `event` first happened, in seconds since the process started."""
        if event not in self.startup and (seconds := seconds_since_process_start()) is not None:
            self.startup[event] = round(seconds, 3)

    def carry_on_from(self, seconds: float) -> None:
        """Count the `seconds` of the run's earlier sessions in."""
        self.before = seconds

    def start(self) -> None:
        self.started = time.monotonic()

    def updated(self, updates: int) -> None:
        """Updates ran, `updates` in all: the update rate's clock starts at the first chunk,
        once the graph is traced."""
        if self.first_update is None:
            self.first_update = (time.monotonic(), updates)
            self.mark("first_update")

    def update_rate(self, updates: int) -> float | None:
        """Updates/s from this session's first chunk of updates to now (publishing,
        evaluations, and any wait for the actors, included)."""
        if self.first_update is None:
            return None
        seconds = time.monotonic() - self.first_update[0]
        return round((updates - self.first_update[1]) / max(seconds, 1e-9), 1)

    def stop(self, updates: int) -> None:
        """The loop ended after `updates`: keep its rate for the summary."""
        self.loop_update_rate = self.update_rate(updates)

    def elapsed(self) -> float:
        """Wall-clock seconds of this run, over all its resumes."""
        if self.started is None:
            return self.before
        return self.before + (time.monotonic() - self.started)


class Board:
    """The run's TensorBoard folder (RUN_DIR/tb)."""

    def __init__(self, folder: Path):
        from edge_rl.tf_setup import tf  # the learner has imported it already

        self.tf = tf
        self.writer = tf.summary.create_file_writer(str(folder))

    def scalars(self, step: int, values: Mapping[str, Any]) -> None:
        """Each of `values` as a scalar at env step `step`."""
        with self.writer.as_default(step=step):
            for name, value in values.items():
                self.tf.summary.scalar(name, value)

    def close(self) -> None:
        self.writer.close()


class Progress:
    """The progress bar, and every LOG_SECONDS the loop's rates, the actors' recent returns,
    the loss and the costs so far in TensorBoard."""

    def __init__(self, config: TrainConfig, state: RunState, learner: Any, costs: RunCosts,
                 board: Board, evolution: Any):
        self.config, self.state, self.learner = config, state, learner
        self.costs, self.board, self.evolution = costs, board, evolution
        self.recent_returns: deque[float] = deque(maxlen=20)  # of episodes the actors ended
        self.last_loss = None
        self.bar: tqdm | None = None  # from open() to close()
        self.last_log = 0.0
        self.last_counts = (0, 0)  # (env steps, updates) at the last log

    def episodes_ended(self, returns: list[float]) -> None:
        self.recent_returns.extend(returns)

    def trained(self, loss: Any) -> None:
        self.last_loss = loss

    def open(self) -> None:
        """Show the bar; the rates count from now."""
        config = self.config
        self.bar = tqdm(total=config.steps, initial=min(self.state.env_steps, config.steps),
                        unit="step", dynamic_ncols=True, disable=None,
                        desc=f"{config.algo} {config.env}")
        self.last_log = time.monotonic()
        self.last_counts = (self.state.env_steps, self.learner.updates)

    def arrived(self, transitions: int) -> None:
        self.bar.update(min(transitions, max(0, self.config.steps - self.bar.n)))

    def tick(self) -> bool:
        """Log the rates if LOG_SECONDS have passed since the last time; whether it did."""
        now = time.monotonic()
        if now - self.last_log < LOG_SECONDS:
            return False
        steps, updates = self.state.env_steps, self.learner.updates
        rates = {
            "actor/steps_per_sec": (steps - self.last_counts[0]) / (now - self.last_log),
            "learner/updates_per_sec": (updates - self.last_counts[1]) / (now - self.last_log),
        }
        self.log_scalars(rates)
        last_eval = self.state.last_eval
        self.bar.set_postfix(
            ret=f"{np.mean(self.recent_returns):.1f}" if self.recent_returns else "-",
            eval=f"{last_eval['mean']:.1f}" if last_eval else "-",
            v=self.state.policy_version,
            ups=f"{rates['learner/updates_per_sec']:.0f}",
        )
        self.last_log, self.last_counts = now, (steps, updates)
        return True

    def log_scalars(self, rates: dict[str, float]) -> None:
        values = dict(rates)
        if self.recent_returns:
            values["actor/episode_return"] = float(np.mean(self.recent_returns))
        if self.last_loss is not None:
            values["learner/loss"] = float(self.last_loss)
        self.board.scalars(self.state.env_steps, values)
        self.board.scalars(self.state.env_steps, self.costs.scalars())
        self.evolution.log_replay(self.state.env_steps)
        self.board.writer.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
