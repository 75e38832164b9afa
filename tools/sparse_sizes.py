"""How small a sparse int8 TD3 actor gets: the forms `edge-rl export` tries, side by side.

    python tools/sparse_sizes.py                     # HalfCheetah 90%, Hopper 98%, ...
    python tools/sparse_sizes.py --quick             # HalfCheetah 90% only (CI runs it)

For each env and actor sparsity it builds a TD3 learner (actor 256x256) with ERK masks and
publishes its actor as the learner does (Learner.publish) at fp32 (the baseline: the same
network, stored dense) and at int8, and reports the int8 file, xz of it, the entropy bound of
its masks and values, and the form export writes beside it (the smallest the device runtime
loads), as ratios against dense fp32. int8 files have no TFLite sparse encoding (export makes
that for fp16 and fp32 only). Weights are Keras' initial ones under the masks; a trained
network's values differ, so trained runs are reported by `edge-rl export` (see docs/sparse.md).
"""

from __future__ import annotations

import argparse

import numpy as np

from edge_rl.agents import get_algorithm
from edge_rl.algorithm import resolve_defaults
from edge_rl.config import TrainConfig
from edge_rl.converters.size import entropy_bound_bytes, int8_zero_fractions
from edge_rl.device.envs import describe_env
from edge_rl.device.policy_file import pack_policy
from edge_rl.loop.export import XZ_EXPORT_PRESET, smallest_loadable
from edge_rl.loop.learner import Learner
from edge_rl.tf_setup import tf

CASES = ["HalfCheetah-v5:0.9", "Hopper-v5:0.98", "Walker2d-v5:0.97", "Ant-v5:0.96"]


def sizes(env: str, sparsity: float) -> dict:
    """Bytes of dense fp32, int8 zeros per layer, and each form's ratio against dense fp32."""
    tf.keras.utils.set_random_seed(0)
    factory = get_algorithm("td3")
    observation, action = describe_env(env)
    config = TrainConfig(algo="td3", env=env, sparsity=sparsity)
    config = resolve_defaults(factory, config, observation, action)
    learner = Learner(factory, config, observation, action)
    calibration = np.random.default_rng(0).normal(size=(500, *observation.shape))
    calibration = calibration.astype(np.float32)
    fp32, _ = learner.publish("fp32", calibration, 1)
    int8, _ = learner.publish("int8", calibration, 1)
    compact, how = smallest_loadable(int8, None, "int8")
    forms = {
        "int8": len(int8),
        "xz(int8)": len(pack_policy(int8, XZ_EXPORT_PRESET)),
        "entropy bound": entropy_bound_bytes(int8),
        "export writes": len(compact),
    }
    return {"fp32": len(fp32), "zeros": int8_zero_fractions(int8), "export form": how,
            **{k: len(fp32) / v for k, v in forms.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=CASES, metavar="ENV:SPARSITY")
    parser.add_argument("--quick", action="store_true", help=f"only {CASES[0]}")
    args = parser.parse_args()
    cases = CASES[:1] if args.quick else args.cases
    print("| env | actor sparsity | dense fp32 | int8 | xz(int8) | entropy bound | "
          "export writes | int8 zeros per layer |")
    print("|---|---|---|---|---|---|---|---|")
    for case in cases:
        env, sparsity = case.split(":")
        r = sizes(env, float(sparsity))
        zeros = ", ".join(f"{z:.3f}" for z in r["zeros"])
        print(f"| {env} | {float(sparsity):.2f} | {r['fp32'] / 1024:.0f} KiB | "
              f"{r['int8']:.1f}x | {r['xz(int8)']:.1f}x | {r['entropy bound']:.1f}x | "
              f"{r['export writes']:.1f}x ({r['export form']}) | {zeros} |", flush=True)


if __name__ == "__main__":
    main()
