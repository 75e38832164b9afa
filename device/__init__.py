"""edge-rl's device runtime: what runs on a CPU, a Raspberry Pi or a Coral board.

Nothing under this package imports TensorFlow (a test enforces it). It holds the policy
runtime (LiteRT, falling back to tflite-runtime), exploration in numpy, the actor loop,
the gRPC client and the wire protocol (`wire.proto`).

    from edge_rl.device import load_policy
    policy = load_policy("policy.tflite")
    actions = policy.act(observations)   # greedy actions for a batch of observations
"""

from edge_rl.device.policy import Policy, load_policy
from edge_rl.device.policy_file import PolicyFileError, PolicyMetadata

__all__ = ["Policy", "PolicyFileError", "PolicyMetadata", "load_policy"]
