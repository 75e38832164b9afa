"""Batches of frames as an actor sends them, for the image path's tests."""

import numpy as np


def frame_batches(n_batches: int, num_envs: int = 3, batch_size: int = 37):
    """Batches of real rollouts of EdgeRL/BrightPatch-v0 (16-frame episodes), several envs
    interleaved and batches cutting episodes, as an actor sends them."""
    from edge_rl.device.rollout import Rollout

    rollout = Rollout("EdgeRL/BrightPatch-v0", num_envs, seed=3, batch_size=batch_size,
                      action_example=np.int64(0))
    rng = np.random.default_rng(0)
    batches = []
    while len(batches) < n_batches:
        actions = rng.integers(0, 4, num_envs)
        batches += rollout.step(actions, actions)
    rollout.close()
    return batches[:n_batches]
