"""How small a sparse int8 TD3 actor gets: every encoding `edge-rl export` tries, side by side.

    python tools/sparse_sizes.py                     # HalfCheetah 90%, Hopper 98%, ...

For each env and actor sparsity it builds the TD3 actor (256x256) with ERK masks, converts it
to dense fp32 (the baseline) and to int8, and reports the int8 file, TFLite's sparse encoding,
xz of each, and the entropy bound of the int8 masks and values, as ratios against dense fp32.
Weights are Keras' initial ones under the masks; a trained network's values differ, so trained
runs are reported by `edge-rl export` (see docs/sparse.md).
"""

from __future__ import annotations

import argparse

import numpy as np

from edge_rl.agents import get_algorithm
from edge_rl.algorithm import resolve_defaults
from edge_rl.config import TrainConfig
from edge_rl.converters import convert
from edge_rl.converters.size import entropy_bound_bytes, int8_zero_fractions
from edge_rl.device.envs import describe_env
from edge_rl.device.policy_file import pack_policy
from edge_rl.export import XZ_EXPORT_PRESET
from edge_rl.learner import Learner
from edge_rl.tf_setup import tf


def sizes(env: str, sparsity: float) -> dict[str, float]:
    tf.keras.utils.set_random_seed(0)
    factory = get_algorithm("td3")
    observation, action = describe_env(env)
    config = TrainConfig(algo="td3", env=env, sparsity=sparsity)
    config = resolve_defaults(factory, config, observation, action)
    learner = Learner(factory, config, observation, action)
    calibration = np.random.default_rng(0).normal(size=(500, *observation.shape))
    model = learner.built.export_model

    def build(precision: str, sparse_encoding: bool = False) -> bytes:
        return convert(model, precision, calibration.astype(np.float32),
                       learner.metadata(precision, 1, env), sparse_encoding)

    fp32, int8, encoded = build("fp32"), build("int8"), build("int8", sparse_encoding=True)
    forms = {
        "int8": len(int8),
        "TFLite sparse": len(encoded),
        "xz(int8)": len(pack_policy(int8, XZ_EXPORT_PRESET)),
        "xz(TFLite sparse)": len(pack_policy(encoded, XZ_EXPORT_PRESET)),
        "entropy bound": entropy_bound_bytes(int8),
    }
    zeros = int8_zero_fractions(int8)
    return {"fp32": len(fp32), "zeros": zeros, **{k: len(fp32) / v for k, v in forms.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=["HalfCheetah-v5:0.9", "Hopper-v5:0.98",
                                                        "Walker2d-v5:0.97", "Ant-v5:0.96"])
    args = parser.parse_args()
    print("| env | actor sparsity | dense fp32 | int8 | TFLite sparse | xz(int8) | "
          "xz(TFLite sparse) | entropy bound | int8 zeros per layer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in args.cases:
        env, sparsity = case.split(":")
        r = sizes(env, float(sparsity))
        zeros = ", ".join(f"{z:.3f}" for z in r["zeros"])
        print(f"| {env} | {float(sparsity):.2f} | {r['fp32'] / 1024:.0f} KiB | "
              f"{r['int8']:.1f}x | {r['TFLite sparse']:.1f}x | {r['xz(int8)']:.1f}x | "
              f"{r['xz(TFLite sparse)']:.1f}x | {r['entropy bound']:.1f}x | {zeros} |", flush=True)


if __name__ == "__main__":
    main()
