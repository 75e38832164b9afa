"""Sparse networks on TFMOT: masks, topology updates, ERK, FLOPs, on real TF-Agents agents."""

import math

import numpy as np
import pytest

from edge_rl.device.observations import vector
from edge_rl.sparse.distribution import active_counts, layer_densities, parameter_count
from edge_rl.sparse.flops import GroupCount, LayerCount, flops_report, forward_flops

CARTPOLE = (vector((4,)), {"kind": "discrete", "n": 2})
PENDULUM = (vector((3,)), {"kind": "continuous", "shape": [1], "low": [-2.0], "high": [2.0]})


def test_erk_keeps_the_budget_and_makes_small_layers_dense():
    shapes = [(17, 256), (256, 256), (256, 6)]
    densities = layer_densities(shapes, 0.9, "erk")
    kept = sum(d * a * b for d, (a, b) in zip(densities, shapes, strict=True))
    assert kept == pytest.approx(0.1 * sum(a * b for a, b in shapes))
    # ERK: density proportional to (n_in + n_out) / (n_in n_out), capped at dense
    assert densities[2] == 1.0
    ratio = densities[0] / densities[1]
    assert ratio == pytest.approx(((17 + 256) / (17 * 256)) / (512 / 256**2))
    assert layer_densities(shapes, 0.9, "uniform") == [pytest.approx(0.1)] * 3
    assert layer_densities(shapes, 0.0, "erk") == [1.0, 1.0, 1.0]


def test_flops_of_a_two_layer_network_by_hand():
    # 4 -> 3 with 6 of 12 weights, 3 -> 2 with 3 of 6 weights
    sparse = [LayerCount(4, 3, 6), LayerCount(3, 2, 3)]
    assert forward_flops(sparse) == (2 * 6 + 3) + (2 * 3 + 2)  # 23
    assert forward_flops([LayerCount(4, 3, 12), LayerCount(3, 2, 6)]) == 27 + 14  # 41
    group = GroupCount(sparse, passes=(2, 1), networks=1)
    # per sample and update: 2 forward + 1 backward (= 2 forward): 4 x 23 sparse, 4 x 41 dense;
    # one topology update per 10 updates adds a forward (23) and a dense backward (2 x 41)
    report = flops_report({"actor": group}, "actor", batch_size=8, updates=10,
                          topology_updates=1)
    sparse_total = 8 * (10 * 4 * 23 + 1 * (23 + 2 * 41))
    dense_total = 8 * 10 * 4 * 41
    assert report["train_flops"] == sparse_total
    assert report["train_flops_vs_dense"] == pytest.approx(sparse_total / dense_total, abs=1e-4)
    assert report["inference_flops_vs_dense"] == pytest.approx(23 / 41, abs=1e-4)


def learner_for(algo, specs, **options):
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig
    from edge_rl.loop.learner import Learner
    from edge_rl.tf_setup import tf

    tf.keras.utils.set_random_seed(0)
    factory = get_algorithm(algo)
    env = "CartPole-v1" if algo == "dqn" else "Pendulum-v1"
    config = TrainConfig(algo=algo, env=env, steps=10_000, hidden=(64, 64), **options)
    config = resolve_defaults(factory, config, *specs)
    return Learner(factory, config, *specs)


def random_batch(specs, n, seed=0):
    rng = np.random.default_rng(seed)
    observation, action = specs
    if action["kind"] == "discrete":
        actions = rng.integers(0, action["n"], n)
    else:
        actions = rng.uniform(-2, 2, (n, *action["shape"])).astype(np.float32)
    return {
        "observation": rng.standard_normal((n, *observation.shape)).astype(np.float32),
        "next_observation": rng.standard_normal((n, *observation.shape)).astype(np.float32),
        "action": actions,
        "reward": rng.standard_normal(n).astype(np.float32),
        "discount": np.full(n, 0.99, np.float32),
    }


def masks_and_kernels(layer):
    from edge_rl.sparse.masks import kernel_and_mask

    return [(kernel.numpy(), mask.numpy() > 0.5) for kernel, mask in
            (kernel_and_mask(w) for w in [layer.wrapper, *layer.target_wrappers])]


@pytest.mark.parametrize("algo,specs", [("td3", PENDULUM), ("sac", PENDULUM),
                                        ("dqn", CARTPOLE)])
def test_rigl_keeps_counts_zeros_targets_and_fresh_slots(algo, specs):
    from edge_rl.sparse.masks import kernel_and_mask, optimizer_slots

    learner = learner_for(algo, specs, sparsity=0.9, critic_sparsity=0.8)
    topology = learner.topology
    assert topology.method == "rigl" and topology.layers
    targets = {"actor": 0.9, "critic": 0.8}
    for group in {layer.group for layer in topology.layers}:
        role = "critic" if group == "critic" else "actor"
        layers = [x for x in topology.layers if x.group == group]
        per_network = {x.name.split("/")[1]: x for x in layers}.values()
        shapes = [x.shape for x in per_network]
        expected = active_counts(shapes, layer_densities(shapes, targets[role], "erk"))
        assert [x.active for x in per_network] == expected

    batch_size = learner.config.batch_size
    for round_ in range(3):
        learner.train(random_batch(specs, 10 * batch_size, seed=round_), 10)
        for layer in topology.layers:
            kernel_and_target = masks_and_kernels(layer)
            kernel, mask = kernel_and_target[0]
            assert mask.sum() == layer.active  # ERK count after every update
            assert not kernel[~mask].any()  # pruned weights exactly zero after Adam steps
            for target_kernel, target_mask in kernel_and_target[1:]:
                assert np.array_equal(target_mask, mask)  # targets carry the online masks
                assert not target_kernel[~mask].any()
        step = 1_000 * (round_ + 1)
        changes = learner.update_topology(step, random_batch(specs, batch_size, seed=9))
        zeta = topology.zeta(step)
        assert 0 < zeta < 0.5
        by_name = {c.layer: c for c in changes}
        replaced = 0
        for layer in topology.layers:
            change = by_name[layer.name]
            kernel_var, _ = kernel_and_mask(layer.wrapper)
            if layer.active == layer.size:  # dense under ERK: untouched
                assert len(change.dropped) == len(change.grown) == 0
                continue
            n = math.floor(zeta * layer.active)
            assert len(change.dropped) == len(change.grown) == n  # exact drop and grow counts
            replaced += n
            kernel, mask = masks_and_kernels(layer)[0]
            assert mask.sum() == layer.active
            assert mask.ravel()[change.grown].all()
            assert not kernel.ravel()[change.grown].any()  # grown weights start at zero
            slots = optimizer_slots(layer.optimizer, kernel_var)
            assert len(slots) == 2
            for slot in slots:  # with fresh Adam moments
                assert not slot.numpy().ravel()[change.grown].any()
            for _, target_mask in masks_and_kernels(layer)[1:]:
                assert np.array_equal(target_mask, mask)
        assert replaced > 0


def test_rigl_grows_where_the_gradient_is_largest():
    from edge_rl.sparse.topology import kernel_gradients

    specs = PENDULUM
    learner = learner_for("td3", specs, sparsity=0.9)
    batch = random_batch(specs, learner.config.batch_size)
    learner.train(random_batch(specs, 5 * learner.config.batch_size), 5)
    from edge_rl.loop.learner import to_experience

    gradients = kernel_gradients(learner.topology, learner.built.losses(to_experience(batch)))
    before = {x.name: masks_and_kernels(x)[0][1].ravel().copy() for x in learner.topology.layers}
    changes = learner.topology.update(1_000, gradients)
    for change in changes:
        if not len(change.grown):
            continue
        score = np.abs(gradients[change.layer].ravel())
        still_off = ~before[change.layer]
        still_off[change.dropped] = True
        still_off[change.grown] = False
        # no connection left out scores above one that was grown
        assert score[still_off].max(initial=0) <= score[change.grown].min() + 1e-12


@pytest.mark.parametrize("method", ["set", "static", "prune"])
def test_set_static_and_prune(method):
    specs = PENDULUM
    distribution = "uniform" if method == "set" else "erk"
    learner = learner_for("td3", specs, sparsity=0.9, topology=method, distribution=distribution)
    topology = learner.topology
    batch_size = learner.config.batch_size
    learner.train(random_batch(specs, 5 * batch_size), 5)
    before = [masks_and_kernels(x)[0][1].copy() for x in topology.layers]
    if method == "prune":  # dense until 20% of the span, then TFMOT's PolynomialDecay
        assert all(m.all() for m in before)
        for step in (1_000, 5_000, 8_000, 9_000):
            learner.update_topology(step, random_batch(specs, batch_size))
        for layer in topology.layers:
            kernel, mask = masks_and_kernels(layer)[0]
            assert mask.sum() == max(1, round(layer.density * layer.size))
            assert not kernel[~mask].any()
        return
    changes = learner.update_topology(1_000, random_batch(specs, batch_size))
    after = [masks_and_kernels(x)[0][1] for x in topology.layers]
    if method == "static":
        assert changes == []
        assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    else:
        assert any(len(c.grown) for c in changes)
        for layer, mask in zip(topology.layers, after, strict=True):
            assert mask.sum() == round(0.1 * layer.size)  # uniform: every layer at 90%


def test_tiny_matches_the_sparse_parameter_count():
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig

    factory = get_algorithm("td3")
    observation, action = vector((17,)), {"kind": "continuous", "shape": [6], "low": [-1] * 6,
                                       "high": [1] * 6}
    config = resolve_defaults(factory, TrainConfig(algo="td3", env="HalfCheetah-v5",
                                                   sparsity=0.9, critic_sparsity=0.85,
                                                   tiny=True), observation, action)
    assert not config.is_sparse
    for role, sparsity, hidden in (("actor", 0.9, config.hidden),
                                   ("critic", 0.85, config.critic_hidden)):
        full = factory.layer_shapes(observation, action, (256, 256), config.algo_options)[role]
        target = parameter_count(full, layer_densities(full, sparsity, "erk"))
        tiny = parameter_count(factory.layer_shapes(observation, action, hidden,
                                                            config.algo_options)[role])
        assert abs(tiny - target) / target < 0.05, (role, hidden)
    # resolving the saved config again changes nothing
    assert resolve_defaults(factory, config, observation, action) == config


@pytest.mark.parametrize("algo, options", [("dqn", {}), ("dqn", {"atoms": 0}),
                                           ("d4pg", {"atoms": 21}), ("td3", {}), ("sac", {})])
def test_layer_shapes_are_the_built_networks_kernels(algo, options):
    # --tiny sizes its dense network by layer_shapes: they must be the kernels of the network
    # the run builds, with the run's own options (DQN's atoms, D4PG's support size)
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig

    factory = get_algorithm(algo)
    if algo == "dqn":
        observation, action, env = vector((4,)), {"kind": "discrete", "n": 2}, "CartPole-v1"
    else:
        observation, env = vector((3,)), "Pendulum-v1"
        action = {"kind": "continuous", "shape": [1], "low": [-2.0], "high": [2.0]}
    config = resolve_defaults(factory, TrainConfig(algo=algo, env=env, hidden=(24, 16),
                                                   algo_options=options), observation, action)
    built = factory.build(observation, action, config)
    networks = {"actor": built.actor_network,
                "critic": getattr(built.agent, "_critic_network", None)
                or getattr(built.agent, "_critic_network_1", None)}
    shapes = factory.layer_shapes(observation, action, (24, 16), config.algo_options)
    for role, kernels in shapes.items():
        built_kernels = [tuple(v.shape) for v in networks[role].trainable_variables
                         if len(v.shape) == 2]
        assert sorted(kernels) == sorted(built_kernels), role
