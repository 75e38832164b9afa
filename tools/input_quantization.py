"""How much of an int8 policy's action error comes from quantizing its input.

    edge-rl export RUN_DIR --fp32 -o fp32.tflite --verify-episodes 0
    edge-rl export RUN_DIR --int8 -o int8.tflite --verify-episodes 0
    python tools/input_quantization.py fp32.tflite int8.tflite [--steps 3000] [--noise 0.2]

An int8 policy keeps a float32 input, but its first operator quantizes the whole observation
vector with one scale. When features of very different ranges share that vector (angles in
[-1, 1] next to velocities of ±50), the small ones get only a few int8 levels, unless the file
has per-feature input scales (metadata format 2: observations are divided by them first, and
the grid below is in those units). Since 2026-11-23 int8 exports compute their first layer in
float32 and have no input grid: this measures --edgetpu exports and older int8 files. This
rolls out
the fp32 policy with Gaussian exploration noise, then compares on the observations it saw:
the fp32 policy fed observations rounded to the int8 input grid, and the int8 policy itself,
each against the fp32 policy's actions. Continuous actions only. Device runtime only (no TF).
"""

from __future__ import annotations

import argparse

import numpy as np

from edge_rl.device import load_policy
from edge_rl.device.envs import make_env


def input_grid(policy) -> tuple[float, int]:
    """(scale, zero point) of the int8 tensor the float observation is quantized into."""
    shape = [1, *policy.metadata.observation_shape]  # one observation (weights are 2-D too)
    for tensor in policy._interpreter.get_tensor_details():
        if tensor["dtype"] == np.int8 and list(tensor["shape"]) == shape:
            scale, zero_point = tensor["quantization"]
            if scale > 0:
                return float(scale), int(zero_point)
    raise SystemExit("no int8 input tensor found: an int8 export reads its observation in "
                     "float32 (its first layer is float32), so there is no input grid to "
                     "measure; give an --edgetpu export, or an int8 one made before 2026-11-23")


def rollout(policy, steps: int, noise: float, seed: int) -> np.ndarray:
    env = make_env(policy.metadata.env_id, seed=seed)
    rng = np.random.default_rng(seed)
    low, high = env.action_space.low, env.action_space.high
    observation, _ = env.reset(seed=seed)
    seen = []
    for _ in range(steps):
        action = policy.act(observation[None].astype(np.float32))[0]
        action = np.clip(action + rng.normal(0.0, noise * (high - low) / 2), low, high)
        observation, _, terminated, truncated, _ = env.step(action)
        seen.append(observation)
        if terminated or truncated:
            observation, _ = env.reset()
    return np.asarray(seen, np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fp32", help="the fp32 policy file")
    parser.add_argument("int8", help="the int8 policy file of the same weights")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--noise", type=float, default=0.2, help="of half the action range")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    fp32, int8 = load_policy(args.fp32), load_policy(args.int8)
    if fp32.metadata.action["kind"] != "continuous":
        raise SystemExit("continuous actions only")
    scale, zero_point = input_grid(int8)
    per_feature = np.asarray(int8.metadata.input_scale or 1.0, np.float32)
    observations = rollout(fp32, args.steps, args.noise, args.seed)
    on_grid = (np.clip(np.round(observations / per_feature / scale) + zero_point, -128, 127)
               - zero_point) * scale * per_feature

    def actions(policy, rows: np.ndarray) -> np.ndarray:
        return np.concatenate([policy.act(row[None].astype(np.float32)) for row in rows])

    reference = actions(fp32, observations)
    span = np.abs(observations).max(axis=0)
    print(f"{fp32.metadata.env_id}: {len(observations)} observations; int8 input scale "
          f"{scale:.4g} (zero point {zero_point}), "
          + ("one a feature" if int8.metadata.input_scale else "one for all features"))
    print("levels across each feature's range: "
          + " ".join(str(int(2 * s / scale) + 1) for s in span / per_feature))
    for name, got in (("fp32 fed the int8 input grid", actions(fp32, on_grid)),
                      ("the int8 policy", actions(int8, observations))):
        error = np.abs(got - reference)
        print(f"{name}: action error mean {error.mean():.4f}, p99 "
              f"{np.quantile(error, 0.99):.3f}, max {error.max():.3f}")


if __name__ == "__main__":
    main()
