"""`edge-rl train`: a TF-Agents learner serving gRPC, with int8 actors in their own processes.

The loop, top to bottom:
  1. take validated batches from the Exchange, put them in replay;
  2. run the updates the samples-per-insert target allows (updates_per_step per env step);
  3. every publish_every updates, convert the actor network at the actors' precision
     (calibrated on recent replay observations) and offer it to the actors (publishing.py);
  4. ack batches once the learner trails the actors by at most max_update_lag updates;
  5. evaluate the quantized policy greedily every eval_every env steps, keep the best
     (evaluation.py), checkpoint every checkpoint_every env steps.
The run's clock, its TensorBoard scalars and the progress bar are progress.py's.
"""

from __future__ import annotations

import logging
import math
import signal
from pathlib import Path
from typing import Any

import grpc

from edge_rl import core
from edge_rl.agents import get_algorithm
from edge_rl.algorithm import check_action_space, resolve_defaults
from edge_rl.config import TrainConfig
from edge_rl.device.envs import describe_env
from edge_rl.device.errors import UserError
from edge_rl.device.evaluate import EvalResult
from edge_rl.device.wire import BatchCosts
from edge_rl.loop.evaluation import Evaluation
from edge_rl.loop.evolution import Evolution, next_multiple
from edge_rl.loop.local_actors import LocalActors
from edge_rl.loop.progress import Board, Progress, RunClock
from edge_rl.loop.publishing import Publisher
from edge_rl.replay import make_replay, train_from_replay
from edge_rl.runs.checkpoint import latest_checkpoint, write_bytes, write_json
from edge_rl.runs.costs import RunCosts
from edge_rl.runs.run_state import RunState, load_checkpoint, save_checkpoint
from edge_rl.runs.summary import run_summary
from edge_rl.transport.ingest import Ingest
from edge_rl.transport.server import LearnerService, RunInfo, start_server

log = logging.getLogger(__name__)

UPDATES_PER_CHUNK = 50  # updates between looks at the actors' queue
PRIORITIZED_UPDATES_PER_SAMPLE = 4  # with prioritized replay: updates per draw


def prepare(config: TrainConfig, resume: bool = False):
    """Check the request, fill in defaults; returns (config, factory, observations, action)."""
    # the flags as given and the env, before the algorithm's import loads TensorFlow: a
    # mistyped flag or env id is answered in a second, not after TensorFlow's ~5 s import
    config.validate()
    observation, action = describe_env(config.env)
    factory = get_algorithm(config.algo)
    check_action_space(factory, config.env, action)
    config = resolve_defaults(factory, config, observation, action)
    config.validate()
    run_dir = config.run_dir
    if not resume and latest_checkpoint(run_dir / "checkpoints") is not None:
        raise UserError(f"{run_dir} already holds a run: add --resume, or pick another --out")
    if resume and latest_checkpoint(run_dir / "checkpoints") is None:
        raise UserError(f"nothing to resume in {run_dir}: it has no checkpoint")
    return config, factory, observation, action


class Training:
    """One run: the learner, its replay, its gRPC service and its local actors; publishing,
    evaluation and what the run shows are its collaborators'."""

    def __init__(self, config: TrainConfig, resume: bool = False):
        self.clock = RunClock()
        self.clock.mark("training_start")
        self.config, self.factory, self.observation, self.action = prepare(config, resume)
        config = self.config
        # First, so the energy figure includes the start-up (TensorFlow's import, tracing)
        self.costs = RunCosts(config.carbon, config.country, config.cpu_watts)
        self.run_dir = config.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config.save(self.run_dir / "config.json")

        from edge_rl.loop.learner import Learner  # imports TensorFlow
        from edge_rl.tf_setup import tf

        tf.keras.utils.set_random_seed(config.seed)  # python, numpy and TF (Keras initializers)
        if config.lockstep:
            tf.config.experimental.enable_op_determinism()
        self.learner: core.Learner = Learner(self.factory, config, self.observation, self.action)
        self.clock.mark("agent_built")
        self.replay: core.ReplayBuffer = make_replay(config, self.observation, self.action)
        self.state = RunState()
        if resume:
            self._restore(latest_checkpoint(self.run_dir / "checkpoints"))
            self.costs.restore(self.state.costs)
        self.ingest = Ingest(self.run_dir / "replay-log", self.replay, self.state.ledger,
                             self.state.actors, self.state.log_position,
                             compress_log=self.observation.kind.once)
        self.exchange: core.PolicyExchange = self.ingest.exchange
        if resume:
            batches, transitions = self.ingest.recover(self.observation, self.action,
                                                       self.account)
            self.state.env_steps += transitions
            log.info("replay log: %d batches (%d transitions) after the checkpoint put back",
                     batches, transitions)
        # Built from here on, they hold the run's state: the restored one on --resume
        self.board = Board(self.run_dir / "tb")
        self.publisher = Publisher(config, self.learner, self.replay, self.exchange, self.state,
                                   self.costs, self.board)
        self.evaluation = Evaluation(config, self.publisher, self.learner, self.replay,
                                     self.state, self.costs, self.board, self.clock)
        self.stop_reason = ""
        # the schedule of topology and replay changes, from where the run stands
        self.evolution = Evolution(config, self.learner, self.replay, self.action,
                                   self.board.writer, self.state)
        self.progress = Progress(config, self.state, self.learner, self.costs, self.board,
                                 self.evolution)
        self.stop_requested = False  # set by Ctrl-C or SIGTERM; the loop stops at its next check
        self.clock.carry_on_from(self.state.wall_seconds)

    # -- the pieces of the loop ----------------------------------------------------------------

    def allowed_updates(self) -> int:
        """Updates the samples-per-insert target allows after the inserted env steps."""
        c = self.config
        return int(math.floor(max(0, self.state.env_steps - c.warmup_steps) * c.updates_per_step))

    def take_batches(self, block: bool) -> int:
        """Move queued batches into replay; returns how many transitions arrived."""
        # lockstep: one batch at a time, so updates and acks follow it exactly
        with self.costs.learner.part("waiting_for_actors" if block else "ingest"):
            taken = self.ingest.take(block, one=self.config.lockstep)
        arrived = sum(len(pending.transitions) for pending in taken)
        if arrived:
            self.clock.mark("first_batch")
        for pending in taken:
            self.progress.episodes_ended(pending.episode_returns)
            self.account(pending.actor_id, pending.costs)
        self.state.env_steps += arrived
        self.exchange.progress["env_steps"] = self.state.env_steps
        return arrived

    def account(self, actor_id: str, costs: BatchCosts) -> None:
        """Add an accepted batch's energy report and loop times to the run's."""
        actor = self.exchange.actors.get(actor_id)
        self.costs.add_batch(costs, actor.host if actor else "")

    def train_chunk(self) -> int:
        """Run up to UPDATES_PER_CHUNK of the updates that are due; returns how many ran."""
        due = self.allowed_updates() - self.learner.updates
        if self.config.lockstep:
            count = max(0, due)  # all of them, before the ack: reproducible
        else:
            count = max(0, min(due, UPDATES_PER_CHUNK))
        done = 0
        while done < count:
            # Stop at the next publish point, so actors get the weights of exactly every
            # publish_every-th update.
            until_publish = self.config.publish_every - self.publisher.updates_since()
            chunk = max(1, min(count - done, until_publish))
            if self.replay.prioritized:
                # few updates per sample, so each draws on nearly the priorities the one
                # before it left (Schaul et al.: 1); 50 drawn at once held worse
                # (docs/learning.md, "Prioritized replay")
                chunk = min(chunk, PRIORITIZED_UPDATES_PER_SAMPLE)
            with self.costs.learner.part("updates"):
                self.progress.trained(train_from_replay(
                    self.learner, self.replay, chunk, self.config.batch_size,
                    self.state.env_steps / self.config.steps))
            done += chunk
            self.clock.updated(self.learner.updates)
            if self.publisher.updates_since() >= self.config.publish_every:
                self.publisher.publish()
        return count

    def release_acks(self) -> None:
        lag = 0 if self.config.lockstep else self.config.max_update_lag
        self.ingest.release(lambda: self.allowed_updates() - self.learner.updates <= lag)
        self.exchange.progress["updates"] = self.learner.updates

    def evaluate_now(self) -> EvalResult:
        """Publish the current weights and evaluate that quantized policy greedily."""
        return self.evaluation.evaluate_now()

    def checkpoint(self) -> None:
        self.state.ledger = self.exchange.ledger.state()
        self.state.actors = self.exchange.actor_index()
        self.state.log_position = self.ingest.position
        self.state.wall_seconds = self.clock.elapsed()
        self.state.costs = self.costs.state()
        with self.costs.learner.part("checkpoints"):
            oldest_needed = save_checkpoint(self.run_dir, self.state, self.learner, self.replay)
        self.ingest.log.forget_before(oldest_needed)
        log.info("checkpoint at %d env steps", self.state.env_steps)

    def _restore(self, folder: Path) -> None:
        self.state = load_checkpoint(self.run_dir, folder, self.learner, self.replay)
        log.info("resumed from %s at %d env steps, %d updates, policy v%d",
                 folder.name, self.state.env_steps, self.learner.updates, self.state.policy_version)

    def _request_stop(self, signum, frame) -> None:
        if self.stop_requested:
            raise KeyboardInterrupt
        self.stop_requested = True

    # -- the run -------------------------------------------------------------------------------

    def service(self) -> LearnerService:
        """This run's gRPC service (what its actors call), not yet serving."""
        config = self.config
        run = RunInfo(
            run_id=self.state.run_id,
            env_id=config.env,
            algo=config.algo,
            observation_shape=self.observation.shape,
            observation_dtype=self.observation.dtype,
            action=self.action,
            batch_transitions=config.batch_transitions,
            max_in_flight=1 if config.lockstep else config.max_in_flight,
            lockstep=config.lockstep,
            num_envs=config.num_envs,
            seed=config.seed,
            exploration=lambda index: self.factory.exploration(config, index),
        )
        return LearnerService(run, self.exchange)

    def serve(self, service: LearnerService | None = None) -> tuple[grpc.Server, int]:
        """Serve `service` (default: `self.service()`) on the run's host and port; returns
        (server, port)."""
        config = self.config
        # Inserts wait in their threads for acks: room for every in-flight batch of a fleet.
        return start_server(
            service or self.service(), config.port,
            max_workers=max(64, config.max_in_flight * (config.actors + 16) + 16),
            host=config.host, token_file=config.token_file, tls_cert=config.tls_cert,
            tls_key=config.tls_key, insecure=config.insecure,
        )

    def run(self) -> dict[str, Any]:
        config = self.config
        self.clock.start()
        interrupted = False
        server, port = self.serve()
        if config.actors == 0:
            log.info("learner listening on %s:%d for actors (run %s)", config.host, port,
                     self.state.run_id)
        try:
            actors = self._start(port)
        except BaseException:
            # Nothing to checkpoint yet. The server's threads would keep the process waiting
            # for ever instead of reporting the error (_start stops its actors itself).
            server.stop(grace=0)
            raise
        # Ctrl-C and SIGTERM only raise a flag that the loop checks between steps: an exception
        # raised in the middle of a TensorFlow call can leave it unable to write the final
        # checkpoint. A second Ctrl-C interrupts at once. The handler is set even when the run
        # was started with SIGINT ignored (as shells do for background jobs).
        previous_sigint = signal.signal(signal.SIGINT, self._request_stop)
        previous_sigterm = signal.signal(signal.SIGTERM, self._request_stop)
        next_eval = next_multiple(self.state.env_steps, config.eval_every)
        next_checkpoint = next_multiple(self.state.env_steps, config.checkpoint_every)
        self.progress.open()
        try:
            while self.state.env_steps < config.steps:
                if self.stop_requested:
                    break
                can_update = self.allowed_updates() > self.learner.updates
                arrived = self.take_batches(block=not can_update)
                self.progress.arrived(arrived)
                self.train_chunk()
                with self.costs.learner.part("topology"):
                    self.evolution.step(self.state.env_steps)
                if self.state.env_steps >= next_eval:
                    next_eval = next_multiple(self.state.env_steps, config.eval_every)
                    result = self.evaluate_now()
                    if config.target_return is not None and result.mean >= config.target_return:
                        self.stop_reason = f"reached target return {config.target_return}"
                        break  # the acks go out once no batch is taken (below)
                if self.state.env_steps >= next_checkpoint:
                    next_checkpoint = next_multiple(self.state.env_steps, config.checkpoint_every)
                    self.checkpoint()
                if self.state.env_steps < config.steps:
                    # The last acks wait until no batch is taken any more (below): an actor
                    # answered now would send its next batch into the log after the final
                    # checkpoint, and a resumed run would count steps the summary does not.
                    self.release_acks()
                if self.progress.tick():
                    # every LOG_SECONDS, with the rates: mark actors gone quiet as gone,
                    # and stop once every local actor has exited
                    self.exchange.sweep(config.actor_timeout)
                    if config.actors and not actors.alive():
                        raise UserError(
                            f"all actors exited (codes {actors.failed()}); "
                            f"see {self.run_dir / 'logs'}"
                        )
            else:
                self.stop_reason = f"reached {config.steps} env steps"
        except KeyboardInterrupt:  # a second Ctrl-C, or one outside the loop's checks
            self.stop_requested = True
        finally:
            self.clock.stop(self.learner.updates)
            if self.stop_requested:
                interrupted = True
                self.stop_reason = "interrupted"
                log.warning("interrupted: stopping actors and writing a final checkpoint")
            signal.signal(signal.SIGTERM, previous_sigterm)
            signal.signal(signal.SIGINT, previous_sigint)
            self.progress.close()
            # No batch goes into the log from now on: the final checkpoint holds all the log
            # has, less batches still queued (not acked: their actors keep them, and the
            # log's copy goes into replay on --resume). What is in replay is in the log too,
            # and will be in the final checkpoint: ack it all.
            self.exchange.stop_taking()
            self.ingest.release_all()
            # Keep serving a little: the acks just released go out, and each actor's next
            # heartbeat (once a second) hears that the run is over.
            self.exchange.wait_for_goodbyes(timeout=5.0)
            actors.stop()
            server.stop(grace=2.0)
            self.exchange.drop_pending()
        return self.finish(interrupted)

    def _start(self, port: int) -> LocalActors:
        """What happens between the server's start and the loop's: the first checkpoint, the
        local actors, the first policy."""
        config = self.config
        if self.learner.updates == 0 and self.state.env_steps == 0:
            self.checkpoint()  # from now on, --resume always has a checkpoint to start from
        # Actors first: their start-up (a new interpreter, imports, envs) overlaps the first
        # conversion; they wait for its policy.
        actors = LocalActors(config.actors, f"127.0.0.1:{port}", self.run_dir / "logs",
                             token_file=config.token_file, tls_ca=config.tls_cert)
        self.clock.mark("actors_started")
        try:  # stop the actor processes if what follows fails
            self.publisher.publish()
            self.clock.mark("first_policy")
            self.evolution.log_networks(self.state.env_steps)
        except BaseException:
            actors.stop()
            raise
        return actors

    def finish(self, interrupted: bool) -> dict[str, Any]:
        if not interrupted and (
            self.state.last_eval is None
            or self.state.last_eval["updates"] != self.learner.updates
        ):
            self.evaluate_now()
        self.checkpoint()
        best = self.run_dir / "best" / "policy.tflite"
        exported = self.run_dir / "policy.tflite"
        if best.is_file():
            write_bytes(exported, best.read_bytes())
        heldout = None
        if exported.is_file() and not interrupted:  # Ctrl-C: stop now, not after more episodes
            heldout = self.evaluation.on_other_episodes(exported)
        summary = run_summary(self, exported if exported.is_file() else None, heldout)
        self.costs.stop()
        write_json(self.run_dir / "summary.json", summary)
        self.board.close()
        self.ingest.close()
        return summary


def run_training(config: TrainConfig, resume: bool = False) -> dict[str, Any]:
    """Train with `config`; with resume=True, continue the run in config.run_dir."""
    return Training(config, resume=resume).run()
