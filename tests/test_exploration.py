import numpy as np
import pytest

from edge_rl.device.exploration import ExplorationSettings, Explorer, sac_sample
from edge_rl.device.observations import vector
from edge_rl.device.policy_file import PolicyMetadata


def meta(action):
    return PolicyMetadata(env_id="X-v0", algo="a", precision="int8", output="action",
                          observation_shape=(3,), action=action)


DISCRETE = meta({"kind": "discrete", "n": 4})
BOX = meta({"kind": "continuous", "shape": [2], "low": [-1.0, 0.0], "high": [1.0, 4.0]})


def test_epsilon_decays_linearly_per_actor_step():
    settings = ExplorationSettings(kind="epsilon_greedy", epsilon_start=1.0, epsilon_end=0.1,
                                   decay_steps=100)
    explorer = Explorer(settings, DISCRETE, np.random.default_rng(0))
    assert explorer.epsilon() == pytest.approx(1.0)
    greedy = np.zeros(50, np.int64)
    actions, deterministic = explorer(np.zeros((50, 4), np.float32), greedy)
    assert explorer.epsilon() == pytest.approx(0.55)
    np.testing.assert_array_equal(deterministic, greedy)
    explorer.steps = 1_000
    actions, _ = explorer(np.zeros((20_000, 4), np.float32), np.zeros(20_000, np.int64))
    random_share = np.mean(actions != 0)  # a random action is non-greedy 3 times in 4
    assert random_share == pytest.approx(0.1 * 3 / 4, abs=0.01)


def test_gaussian_noise_scales_with_the_half_range_and_clips():
    settings = ExplorationSettings(kind="gaussian", noise_std=0.1)
    explorer = Explorer(settings, BOX, np.random.default_rng(0))
    greedy = np.tile(np.asarray([[0.0, 2.0]], np.float32), (50_000, 1))
    actions, _ = explorer(np.zeros_like(greedy), greedy)
    assert actions.dtype == np.float32
    np.testing.assert_allclose(actions.std(axis=0), [0.1, 0.2], rtol=0.03)
    edge = np.tile(np.asarray([[1.0, 4.0]], np.float32), (1000, 1))
    actions, _ = explorer(np.zeros_like(edge), edge)
    assert actions[:, 0].max() <= 1.0 and actions[:, 1].max() <= 4.0


def test_random_warmup_steps_ignore_the_policy():
    settings = ExplorationSettings(kind="gaussian", noise_std=0.0, random_steps=1000)
    explorer = Explorer(settings, BOX, np.random.default_rng(0))
    greedy = np.zeros((1000, 2), np.float32)
    actions, deterministic = explorer(greedy, greedy)
    assert actions[:, 1].min() >= 0.0 and actions[:, 1].max() <= 4.0
    assert actions[:, 1].std() > 1.0  # uniform on [0, 4]
    # what the replay stores as the behaviour's action (RLx2's policy distance) is the random
    # action that was taken, not the untrained network's
    np.testing.assert_array_equal(deterministic, actions)
    actions, deterministic = explorer(greedy, greedy)  # warm-up over: greedy + zero noise
    np.testing.assert_array_equal(actions, greedy)
    np.testing.assert_array_equal(deterministic, greedy)


def test_sac_sampling_matches_tf_agents_distribution():
    """The device samples SAC actions like TF-Agents' squashed Gaussian actor does."""
    from edge_rl.agents.parts.networks import SquashedGaussianActor
    from edge_rl.agents.parts.specs import tf_specs
    from edge_rl.tf_setup import tf

    low, high = np.asarray([-2.0, 0.0], np.float32), np.asarray([2.0, 1.0], np.float32)
    action = {"kind": "continuous", "shape": [2], "low": low.tolist(), "high": high.tolist()}
    time_step_spec, action_spec = tf_specs(vector((3,)), action)
    actor = SquashedGaussianActor(time_step_spec.observation, action_spec, (16,))
    observation = tf.constant([[0.3, -1.0, 2.0]], tf.float32)
    actor.create_variables(time_step_spec.observation)
    # fixed network outputs: set the head to produce chosen mean/log-std regardless of input
    actor.head.set_weights([np.zeros((16, 4), np.float32),
                            np.asarray([0.4, -1.2, np.log(0.5), np.log(1.5)], np.float32)])
    distribution, _ = actor(observation)
    tf.random.set_seed(0)
    tf_samples = distribution.sample(100_000).numpy().reshape(-1, 2)
    outputs = actor.mean_log_std(observation).numpy()
    noise = np.random.default_rng(0).standard_normal((100_000, outputs.shape[-1] // 2))
    device = sac_sample(np.repeat(outputs, 100_000, axis=0), low, high, noise)
    np.testing.assert_allclose(device.mean(axis=0), tf_samples.mean(axis=0), atol=0.01)
    np.testing.assert_allclose(device.std(axis=0), tf_samples.std(axis=0), atol=0.01)
    assert device.min(axis=0)[1] >= 0.0 and device.max(axis=0)[0] <= 2.0


def test_a_sac_file_outputs_the_greedy_action_first_and_actors_sample_its_second_output():
    """Output 0 of an exported SAC file is the greedy action in the env's units, for any
    TFLite runtime; the actor's explorer samples the Gaussian of output 1, as TF-Agents does."""
    from ai_edge_litert.interpreter import Interpreter

    from edge_rl.agents.parts.networks import (
        SquashedGaussianActor,
        export_model,
        squashed_gaussian_outputs,
    )
    from edge_rl.agents.parts.specs import tf_specs
    from edge_rl.converters import convert
    from edge_rl.device import Policy
    from edge_rl.tf_setup import tf

    low, high = np.asarray([-2.0, 0.0], np.float32), np.asarray([2.0, 1.0], np.float32)
    action = {"kind": "continuous", "shape": [2], "low": low.tolist(), "high": high.tolist()}
    time_step_spec, action_spec = tf_specs(vector((3,)), action)
    actor = SquashedGaussianActor(time_step_spec.observation, action_spec, (16,))
    actor.create_variables(time_step_spec.observation)
    actor.head.set_weights([np.zeros((16, 4), np.float32),
                            np.asarray([0.4, -1.2, np.log(0.5), np.log(1.5)], np.float32)])
    model = export_model(vector((3,)), [*actor.hidden_layers, actor.head],
                         squashed_gaussian_outputs(action_spec))
    meta = PolicyMetadata(env_id="Test-v0", algo="sac", precision="fp32",
                          output="squashed_gaussian", observation_shape=(3,), action=action)
    flat = convert(model, "fp32", None, meta)
    observation = np.asarray([[0.3, -1.0, 2.0]], np.float32)

    interpreter = Interpreter(model_content=flat)  # no edge-rl code between
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], observation)
    interpreter.invoke()
    first = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    mode = low + (np.tanh([0.4, -1.2]) + 1.0) * 0.5 * (high - low)
    np.testing.assert_allclose(first[0], mode, rtol=1e-5)

    policy = Policy(flat)
    np.testing.assert_allclose(policy.act(observation)[0], mode, rtol=1e-5)
    explorer = Explorer(ExplorationSettings(kind="sac"), meta, np.random.default_rng(0))
    outputs = policy.outputs(np.repeat(observation, 50_000, axis=0))
    actions, greedy = explorer(outputs, policy.greedy(outputs))
    distribution, _ = actor(tf.constant(observation))
    tf.random.set_seed(0)
    tf_samples = distribution.sample(50_000).numpy().reshape(-1, 2)
    np.testing.assert_allclose(actions.mean(axis=0), tf_samples.mean(axis=0), atol=0.015)
    np.testing.assert_allclose(actions.std(axis=0), tf_samples.std(axis=0), atol=0.015)
    np.testing.assert_allclose(greedy, np.repeat(mode[None], 50_000, axis=0), rtol=1e-5)


def test_exploration_and_output_kinds_are_open_to_new_ones():
    """An algorithm of the user's can bring its own output meaning and its own exploration:
    both are registries on the device side, with the built-in kinds as entries."""
    from edge_rl.device.exploration import EXPLORATIONS, register_exploration
    from edge_rl.device.outputs import (
        OUTPUT_KINDS,
        OutputKind,
        greedy_actions,
        output_count,
        register_output_kind,
    )
    from edge_rl.device.policy_file import PolicyMetadata

    register_output_kind(OutputKind(  # e.g. preferences over actions, act on the lowest
        "costs", 1, lambda outputs, low, high: np.argmin(outputs, axis=-1).astype(np.int64)))

    @register_exploration("always-zero")
    def always_zero(explorer, outputs, greedy):
        return np.zeros_like(greedy)

    try:
        outputs = np.asarray([[3.0, 1.0, 2.0], [0.0, 5.0, 9.0]], np.float32)
        assert greedy_actions("costs", outputs, None, None).tolist() == [1, 0]
        assert output_count("costs") == 1 and output_count("squashed_gaussian") == 2
        meta = PolicyMetadata(env_id="X-v0", algo="mine", precision="int8", output="costs",
                              observation_shape=(3,), action={"kind": "discrete", "n": 3})
        assert PolicyMetadata.from_json(meta.to_json()).output == "costs"
        explorer = Explorer(ExplorationSettings(kind="always-zero"), meta,
                            np.random.default_rng(0))
        actions, deterministic = explorer(outputs, np.asarray([1, 0], np.int64))
        assert actions.tolist() == [0, 0] and deterministic.tolist() == [1, 0]
    finally:
        del OUTPUT_KINDS["costs"], EXPLORATIONS["always-zero"]
    with pytest.raises(ValueError, match="unknown exploration kind 'always-zero'"):
        Explorer(ExplorationSettings(kind="always-zero"), meta, np.random.default_rng(0))
