"""TensorFlow as the learner side uses it: legacy Keras (tf-keras 2.15), quiet logs.

The environment variables that select legacy Keras are set in `edge_rl/__init__.py`, which
Python runs before any module of this package, and so before TensorFlow's first import.
"""

from __future__ import annotations

import contextlib
import io
import os

import tensorflow as tf

tf.get_logger().setLevel("ERROR")

# TF-Agents imports the old `gym`, which prints an "unmaintained" notice on import; edge-rl
# uses gymnasium and never steps a gym env, so the notice is only noise.
with contextlib.redirect_stderr(io.StringIO()):
    try:
        import gym  # noqa: F401
    except ImportError:
        pass

# TF-Agents imports dm_control's suite where it is installed, which looks for an OpenGL
# backend on import; on a machine without a display (with the [atari] extra's libraries
# present) that search warns "GLFWError: ... DISPLAY environment variable is missing" in
# every run. The learner never renders: tell MuJoCo so, unless MUJOCO_GL says otherwise.
os.environ.setdefault("MUJOCO_GL", "disable")

__all__ = ["tf"]
