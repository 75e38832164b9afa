"""What the categorical (distributional) learners share: D4PG's critic and C51's Q-network
predict returns as probabilities over a fixed, evenly spaced support (Bellemare et al., 2017)."""

from __future__ import annotations

from edge_rl.tf_setup import tf


def project_onto_support(target_values: tf.Tensor, probabilities: tf.Tensor,
                         support: tf.Tensor) -> tf.Tensor:
    """Project atoms `target_values` [B, M] with `probabilities` [B, M] onto `support` [N]."""
    v_min, v_max = support[0], support[-1]
    delta = support[1] - support[0]
    clipped = tf.clip_by_value(target_values, v_min, v_max)
    # weight[b, i, j]: the share of target atom j that lands on support atom i; it is nonzero
    # only for the (at most two) support atoms within one spacing of the target atom
    distance = tf.abs(clipped[:, None, :] - support[None, :, None])
    weight = tf.clip_by_value(1.0 - distance / delta, 0.0, 1.0)
    return tf.reduce_sum(weight * probabilities[:, None, :], axis=-1)
