"""D4PG: the categorical projection, the n-step distributional target, training on a batch."""

import numpy as np
import pytest

from edge_rl.device.errors import UserError
from edge_rl.device.observations import vector

PENDULUM = (vector((3,)), {"kind": "continuous", "shape": [1], "low": [-2.0], "high": [2.0]})
SMALL_SUPPORT = {"atoms": 5, "v_min": -2.0, "v_max": 2.0}  # z = -2, -1, 0, 1, 2; dz = 1


def build(gamma=0.99, hidden=(16, 16), **config_options):
    """A D4PG factory's BuiltAgent on Pendulum-v1's specs."""
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig
    from edge_rl.tf_setup import tf

    tf.keras.utils.set_random_seed(0)
    factory = get_algorithm("d4pg")
    config = TrainConfig(algo="d4pg", env="Pendulum-v1", steps=10_000, hidden=hidden,
                         gamma=gamma, **config_options)
    config = resolve_defaults(factory, config, *PENDULUM)
    config.validate()
    return factory.build(*PENDULUM, config)


def learner(**config_options):
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig
    from edge_rl.loop.learner import Learner
    from edge_rl.tf_setup import tf

    tf.keras.utils.set_random_seed(0)
    factory = get_algorithm("d4pg")
    config = TrainConfig(algo="d4pg", env="Pendulum-v1", steps=10_000, hidden=(64, 64),
                         batch_size=64, **config_options)
    config = resolve_defaults(factory, config, *PENDULUM)
    config.validate()
    return Learner(factory, config, *PENDULUM)


def project(targets, probabilities, support=(-2.0, -1.0, 0.0, 1.0, 2.0)):
    from edge_rl.agents.parts.categorical import project_onto_support
    from edge_rl.tf_setup import tf

    return project_onto_support(tf.constant([targets], tf.float32),
                                tf.constant([probabilities], tf.float32),
                                tf.constant(support, tf.float32)).numpy()[0]


def test_projection_of_targets_on_the_atoms_is_the_identity():
    probabilities = [0.1, 0.2, 0.3, 0.4, 0.0]
    assert project([-2, -1, 0, 1, 2], probabilities) == pytest.approx(probabilities)
    # the same atoms in another order carry their mass along
    assert project([2, 1, 0, -1, -2], probabilities) == pytest.approx([0.0, 0.4, 0.3, 0.2, 0.1])


def test_projection_splits_mass_between_neighbours_by_distance():
    # -1.5 (p 0.5): halfway between -2 and -1 -> 0.25 each
    # 0.25 (p 0.5): 0.25 above 0 -> 0.75 * 0.5 = 0.375 on 0, 0.25 * 0.5 = 0.125 on 1
    got = project([-1.5, 0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0.0, 0.0, 0.0])
    assert got == pytest.approx([0.25, 0.25, 0.375, 0.125, 0.0])


def test_projection_puts_mass_outside_the_support_on_the_end_atoms():
    # -5 (0.1) and -2.5 (0.2) clip to -2: 0.3; 3 (0.3) and 10 (0.15) clip to 2: 0.45;
    # 1.5 (0.25) splits 0.125 / 0.125 between 1 and 2 -> 2 holds 0.45 + 0.125 = 0.575
    got = project([-5.0, -2.5, 3.0, 10.0, 1.5], [0.1, 0.2, 0.3, 0.15, 0.25])
    assert got == pytest.approx([0.3, 0.0, 0.0, 0.125, 0.575])
    assert got.sum() == pytest.approx(1.0)


def test_terminal_and_truncated_transitions():
    from edge_rl.agents.parts.categorical import project_onto_support
    from edge_rl.tf_setup import tf

    agent = build(gamma=0.5, algo_options=SMALL_SUPPORT).agent
    probabilities = tf.constant([[0.1, 0.2, 0.3, 0.4, 0.0]] * 2)
    rewards = tf.constant([0.6, 0.5])
    discounts = tf.constant([0.0, 1.0])  # terminated; truncated after one step (gamma^0)
    atoms = agent.target_atoms(rewards, discounts).numpy()
    got = project_onto_support(agent.target_atoms(rewards, discounts), probabilities,
                               agent.support).numpy()
    # terminal: every atom lands on r = 0.6 -> 0.4 on 0, 0.6 on 1
    assert atoms[0] == pytest.approx([0.6] * 5)
    assert got[0] == pytest.approx([0.0, 0.0, 0.4, 0.6, 0.0])
    # truncated: 0.5 + 0.5 * z = -0.5, 0, 0.5, 1, 1.5 with p 0.1, 0.2, 0.3, 0.4, 0
    # -0.5 -> 0.05 on -1, 0.05 on 0; 0 -> 0.2 on 0; 0.5 -> 0.15 on 0, 0.15 on 1; 1 -> 0.4 on 1
    assert atoms[1] == pytest.approx([-0.5, 0.0, 0.5, 1.0, 1.5])
    assert got[1] == pytest.approx([0.0, 0.05, 0.05 + 0.2 + 0.15, 0.15 + 0.4, 0.0])


def test_nstep_distributional_target_from_the_replay():
    from edge_rl.device.wire import Transitions
    from edge_rl.loop.learner import to_experience
    from edge_rl.replay.buffer import Replay

    gamma = 0.5
    replay = Replay(100, (3,), (1,), "float32", gamma=gamma, nstep=3, seed=0)
    steps = np.arange(4)
    observations = np.repeat(steps[:, None], 3, axis=1).astype(np.float32)
    actions = np.zeros((4, 1), np.float32)
    replay.insert(0, Transitions(
        observation=observations, action=actions, deterministic_action=actions,
        reward=np.array([1.0, 2.0, 4.0, 8.0], np.float32), next_observation=observations + 1,
        terminated=np.zeros(4, bool), truncated=np.zeros(4, bool),
        episode_id=np.zeros(4, np.int64), episode_step=steps))
    batch = replay.sample(64)
    agent = build(gamma=gamma, algo_options=SMALL_SUPPORT).agent
    _, _, next_time_steps = agent._as_transition(to_experience(batch))
    atoms = agent.target_atoms(next_time_steps.reward, next_time_steps.discount).numpy()
    z = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    by_step = {int(batch["observation"][i, 0]): atoms[i] for i in range(64)}
    # step 0: R = 1 + 0.5 * 2 + 0.25 * 4 = 3 over k = 3 steps, discount gamma^2 = 0.25,
    # so the atoms are 3 + gamma * 0.25 * z = 3 + 0.125 z
    assert by_step[0] == pytest.approx(3.0 + 0.125 * z)
    # step 2: only 2 steps stored so far: R = 4 + 0.5 * 8 = 8, discount gamma^1 -> 8 + 0.25 z
    assert by_step[2] == pytest.approx(8.0 + 0.25 * z)
    # step 3: one step, R = 8, discount gamma^0 -> 8 + 0.5 z
    assert by_step[3] == pytest.approx(8.0 + 0.5 * z)


@pytest.mark.parametrize("terminal", [True, False])
def test_critic_loss_falls_on_a_fixed_batch_and_actions_stay_in_bounds(terminal):
    from test_sparse import random_batch

    from edge_rl.agents.parts.categorical import project_onto_support
    from edge_rl.loop.learner import to_experience
    from edge_rl.tf_setup import tf

    run = learner(learning_rate=1e-3, algo_options={"v_min": -10.0, "v_max": 10.0})
    batch = random_batch(PENDULUM, 64, seed=1)
    if terminal:
        batch["discount"][:] = 0.0  # the target is r alone: a two-atom distribution
    agent = run.agent

    def loss_and_target_entropy():
        time_steps, policy_steps, next_time_steps = agent._as_transition(to_experience(batch))
        loss = agent.critic_loss(time_steps, policy_steps.action, next_time_steps)
        # the target distribution, as the loss builds it: its entropy is the loss's floor
        next_actions, _ = agent._target_actor_network(next_time_steps.observation)
        logits, _ = agent._target_critic_network((next_time_steps.observation, next_actions))
        target = project_onto_support(
            agent.target_atoms(next_time_steps.reward, next_time_steps.discount),
            tf.nn.softmax(logits), agent.support).numpy()
        entropy = -np.sum(target * np.log(np.maximum(target, 1e-12)), axis=-1).mean()
        actor_loss = agent.actor_loss(time_steps)
        return float(loss), float(entropy), float(actor_loss)

    start, start_entropy, _ = loss_and_target_entropy()
    repeated = {k: np.concatenate([v] * 200) for k, v in batch.items()}
    last_loss = run.train(repeated, 200)
    end, end_entropy, end_actor = loss_and_target_entropy()
    assert run.updates == 200
    # the learner reports the last update's loss, critic's and actor's: what they are now
    # but for that one update's step
    assert float(last_loss) == pytest.approx(end + end_actor, abs=0.1 * (abs(end) + abs(end_actor)))
    if terminal:
        # start: near-uniform logits, about log(51) = 3.9; the target's own entropy is
        # at most log(2) = 0.69
        assert end < 0.5 * start
    else:
        # r + 0.99 z spreads the target over the whole support (entropy near log(51)), so
        # the loss itself can barely fall: its excess over that floor (the KL) must
        assert end - end_entropy < 0.5 * (start - start_entropy)
    observations = 100.0 * np.random.default_rng(2).standard_normal((256, 3)).astype(np.float32)
    actions = run.built.export_model(observations).numpy()
    assert np.all(actions >= -2.0) and np.all(actions <= 2.0)


def test_builds_sparse_exports_the_actor_and_checkpoints(tmp_path):
    from test_sparse import masks_and_kernels, random_batch

    from edge_rl.loop.learner import to_experience

    run = learner(sparsity=0.8)
    assert run.config.is_sparse and run.topology is not None
    assert [g.name for g in run.built.groups] == ["actor", "critic"]
    assert run.built.output_kind == "action"
    critic = run.built.groups[1].networks[0]
    assert critic.layers[-1].layer.units == 51  # the default support's logits
    run.train(random_batch(PENDULUM, 64 * 5, seed=3), 5)
    # RigL grows by the gradients of the per-group losses
    assert run.update_topology(1_000, random_batch(PENDULUM, 64, seed=7))
    for layer in run.topology.layers:  # targets carry the online masks, zeros stay zero
        (kernel, mask), *targets = masks_and_kernels(layer)
        assert not kernel[~mask].any()
        for target_kernel, target_mask in targets:
            assert np.array_equal(target_mask, mask) and not target_kernel[~mask].any()
    observations = np.random.default_rng(4).standard_normal((32, 3)).astype(np.float32)
    exported = run.built.export_model(observations).numpy()
    actor_output, _ = run.built.actor_network(observations, training=False)
    np.testing.assert_allclose(exported, actor_output.numpy(), rtol=1e-5, atol=1e-6)

    run.save(tmp_path)
    run.train(random_batch(PENDULUM, 64 * 5, seed=6), 5)
    assert not np.allclose(run.built.export_model(observations).numpy(), exported)
    run.restore(tmp_path)
    assert run.updates == 5
    np.testing.assert_allclose(run.built.export_model(observations).numpy(), exported)
    losses = run.built.losses(to_experience(random_batch(PENDULUM, 64, seed=5)))
    assert set(losses) == {"actor", "critic"}
    assert np.isfinite(float(losses["critic"]())) and np.isfinite(float(losses["actor"]()))


def test_builds_on_pendulum_specs_from_describe_env():
    from edge_rl.device.envs import describe_env

    observation, action = describe_env("Pendulum-v1")
    assert (observation, action["kind"]) == (PENDULUM[0], "continuous")
    built = build(hidden=(8,))
    assert built.export_model.output_shape == (None, 1)


def test_each_actor_explores_at_its_own_scale():
    from edge_rl.agents import get_algorithm
    from edge_rl.agents.d4pg import actor_noise_scales
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig

    assert actor_noise_scales(0.2, 1) == [0.2]
    # geometric from 0.5x to 2x: 0.1, 0.2, 0.4
    assert actor_noise_scales(0.2, 3) == pytest.approx([0.1, 0.2, 0.4])
    factory = get_algorithm("d4pg")
    config = resolve_defaults(factory, TrainConfig(algo="d4pg", env="Pendulum-v1", actors=3))
    settings = [factory.exploration(config, i) for i in range(4)]
    assert [s.noise_std for s in settings] == pytest.approx([0.1, 0.2, 0.4, 0.1])
    assert {s.kind for s in settings} == {"gaussian"}
    assert settings[0].random_steps == 5_000 // 3
    single = resolve_defaults(factory, TrainConfig(algo="d4pg", env="Pendulum-v1"))
    assert factory.exploration(single, 0).noise_std == pytest.approx(0.2)


@pytest.mark.parametrize("options, fragment", [
    ({"atoms": 1}, "--atoms must be an integer >= 2"),
    ({"v_min": 5.0, "v_max": 5.0}, "--v-min (5) must be below --v-max (5)"),
    ({"v_min": 200.0}, "--v-min (200) must be below --v-max (150)"),  # the default v_max
])
def test_a_bad_support_is_a_user_error(options, fragment):
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig

    config = TrainConfig(algo="d4pg", env="Pendulum-v1", algo_options=options)
    with pytest.raises(UserError) as error:
        resolve_defaults(get_algorithm("d4pg"), config).validate()
    assert fragment in str(error.value)


def test_cli_flags_reach_algo_options():
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.cli_run import run_config

    config = run_config(False, None, {"algo": "d4pg", "v_max": None},
                        ["--atoms", "11", "--v-min=-5"])
    assert config.algo_options == {"atoms": 11, "v_min": -5.0}
    resolved = resolve_defaults(get_algorithm("d4pg"), config)
    assert resolved.algo_options["atoms"] == 11 and resolved.algo_options["v_max"] == 150.0
    assert resolved.nstep == 5
    with pytest.raises(UserError, match="td3 takes no --atoms"):
        resolve_defaults(get_algorithm("td3"), config.replace(algo="td3"))
