"""Import TensorFlow the one way this project supports: legacy Keras (tf-keras 2.15).

TFMOT and tf.keras must see the same Keras classes, which needs TF_USE_LEGACY_KERAS=1 set
before TensorFlow is first imported. Every learner-side module gets TensorFlow from here.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

tf.get_logger().setLevel("ERROR")

__all__ = ["tf"]
