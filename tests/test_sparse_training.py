"""End to end: TD3 with 90%-sparse networks and RLx2 on Pendulum, int8 actors, export."""

import json

import numpy as np
import pytest
from conftest import edge_rl, train

from edge_rl.device import load_policy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sparse_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sparse") / "run"
    return out, train(out, "--algo", "td3", "--env", "Pendulum-v1", "--sparsity", "0.9",
                      "--rlx2", "--steps", "20000", "--eval-every", "2500", "--eval-episodes",
                      "10", "--topology-interval", "2500", "--seed", "0",
                      # RLx2's switch from 1- to 3-step targets, which the default does not
                      # make below 3M steps
                      "--nstep-delay", "10000",
                      # a quarter of the default batch: 128 took ~25% less time than 256
                      # (three runs, best returns -192, -147 and -148, 2026-11-29; the line is
                      # -400), 64 ~15% less than 128 (alone on 2 cores: 64-70 s against 78 s;
                      # best returns -144, -156 and -150 against -145, 2026-12-06)
                      "--batch-size", "64")


def test_sparse_rlx2_td3_learns_pendulum(sparse_run):
    out, summary = sparse_run
    # seed 0 reaches about -150 from 10k steps on (at 15k steps it learned only at its last
    # evaluation, -202 once and -409 once: too close to the line)
    assert summary["best_return"]["mean"] > -400
    assert summary["topology"] == "rigl" and summary["topology_updates"] >= 3
    # each network evolves every 2,500 of its own updates: TD3's actor trains every 2nd
    by_group = summary["topology_updates_by_group"]
    assert by_group["critic"] >= 4 and 2 <= by_group["actor"] <= (by_group["critic"] + 1) // 2
    assert summary["nstep"] == 3  # the delayed multi-step target switched on
    networks = summary["networks"]
    for group in ("actor", "critic"):
        assert networks["groups"][group]["sparsity"] == pytest.approx(0.9, abs=0.002)
        counts = networks["groups"][group]
        assert counts["nonzero_parameters"] < 0.15 * counts["dense_parameters"]
    assert 0.05 < networks["train_flops_vs_dense"] < 0.2
    assert 0.05 < networks["inference_flops_vs_dense"] < 0.15
    # broadcasts travel xz-packed: a fraction of the plain int8 file
    assert summary["policy_bytes"] < 0.3 * (out / "policy.tflite").stat().st_size
    config = json.loads((out / "config.json").read_text())
    assert config["delayed_nstep"] and config["dynamic_buffer"] and config["nstep_delay"] == 10_000


def test_export_keeps_the_erk_zeros_and_packs_small(sparse_run):
    from edge_rl.converters.size import int8_zero_fractions

    out, summary = sparse_run
    # --force: this checks what export keeps of the masks. Whether the export check passes
    # this free-running run's int8 actor varies run to run (once in ~40 CI runs it refused,
    # 2.4% against 2%); tests/test_export_check.py tests the refusal itself.
    result = edge_rl("export", out, "--int8", "--force", "--verify-episodes", "0")
    assert result.returncode == 0, result.stderr[-3000:]
    model = (out / "policy-int8.tflite").read_bytes()
    erk = [layer["sparsity"] for layer in summary["networks"]["layers"]
           if layer["group"] == "actor"]
    zeros = int8_zero_fractions(model)
    assert len(zeros) == len(erk)
    assert zeros[1] >= 0.9  # the 256x256 layer
    for zero_fraction, target in zip(zeros, erk, strict=True):
        assert zero_fraction >= target - 1e-6  # every mask's zeros survive quantization
    packed = out / "policy-int8.tflite.xz"
    assert packed.stat().st_size * 4 < len(model)
    fp32_bytes = int(result.stdout.split("dense fp32 (")[1].split()[0])
    # The 15x target at 90% sparsity is the plain int8 file's. Export ships that file
    # unless it fails its check (this free-running run's does now and then); then it ships the
    # one with the last int8 layer's units rescaled: the same zeros, its values spread over
    # more int8 levels, so its xz is a little larger (15.4x against 14.8x for one run's actor).
    if "rescaled" not in result.stdout:
        assert fp32_bytes / packed.stat().st_size >= 15, result.stdout
    else:  # the plain file, made here as export makes it, meets the target ...
        from edge_rl.loop.export import RunExport, smallest_loadable

        export = RunExport(out, verify_episodes=0)
        plain, _ = smallest_loadable(export.build("int8", export.rows), None, "int8")
        assert fp32_bytes / len(plain) >= 15, result.stdout
        # ... and the fallback keeps its zeros: at most one more byte per nonzero weight of
        # the rescaled layer (int8 holds 8 bits)
        nonzero_weights = (1 - zeros[1]) * 256 * 256
        assert packed.stat().st_size <= len(plain) + nonzero_weights, result.stdout
    observations = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    assert np.array_equal(load_policy(packed).act(observations),
                          load_policy(out / "policy-int8.tflite").act(observations))
    assert "actor_dense_1 [256, 256]" in result.stdout
