"""Networks built from plain Dense layers, each wrapped for pruning (TFMOT) when sparse, after a
convolutional encoder when observations are images.

TF-Agents' own ActorNetwork, CriticNetwork and ActorDistributionNetwork create their Dense
layers internally; these keep the layers in view and give the exported Keras model the same
layer objects (and so the same weights) as the network being trained.
"""

from __future__ import annotations

import tensorflow_probability as tfp
from tf_agents.distributions import utils as distribution_utils
from tf_agents.networks import network, sequential
from tf_agents.specs import distribution_spec, tensor_spec

from edge_rl.device.errors import UserError
from edge_rl.device.exploration import LOG_STD_MAX, LOG_STD_MIN  # one clip, both sides
from edge_rl.device.observations import ObservationSpec
from edge_rl.sparse.masks import dense, unwrap
from edge_rl.tf_setup import tf


def dense_stack(hidden: tuple[int, ...], name: str, sparse: bool) -> list:
    return [dense(units, "relu", f"{name}_dense_{i}", sparse) for i, units in enumerate(hidden)]


# Convolutional encoders, (filters, kernel, stride) per ReLU layer. Frames of Atari's size get
# the Nature DQN's (Mnih et al., 2015); small ones, such as MinAtar's 10x10, the MinAtar
# paper's single 3x3 layer of 16 filters at stride 1 (Young & Tian, 2019), which the Nature
# one's 8x8 stride-4 first layer would reduce to a couple of pixels.
NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
SMALL_CONVS = ((16, 3, 1),)
NATURE_MIN_SIDE = 36  # the Nature stack's smallest input: 36 -> 8 -> 3 -> 1


def image_encoder(observation: ObservationSpec, name: str, sparse: bool) -> list:
    """Layers from a batch of images, as their kind stores them, to one flat feature vector:
    scaled to [0, 1] inside the network (so a policy file takes the env's raw bytes), then
    convolutions, then flattened. Dense (not sparse) layers only, for now."""
    if sparse:
        raise UserError("sparse networks for image observations are not supported yet "
                        "(drop --sparsity and --topology)")
    shape = observation.shape
    layers = []
    if len(shape) == 2:  # grayscale frames without a channel axis
        # tf.reshape with a free batch (-1): Keras' Reshape layer takes the batch size from
        # the input's shape, which the converter freezes at 1, so no other batch would run
        layers.append(tf.keras.layers.Lambda(lambda x: tf.reshape(x, (-1, *shape, 1)),
                                             name=f"{name}_channels"))
    scale = 1.0 / observation.kind.value_max
    layers.append(tf.keras.layers.Lambda(lambda x: tf.cast(x, tf.float32) * scale,
                                         name=f"{name}_scale"))
    convs = NATURE_CONVS if min(shape[:2]) >= NATURE_MIN_SIDE else SMALL_CONVS
    for i, (filters, kernel, stride) in enumerate(convs):
        layers.append(tf.keras.layers.Conv2D(filters, kernel, strides=stride, activation="relu",
                                             name=f"{name}_conv_{i}"))
    layers.append(tf.keras.layers.Flatten(name=f"{name}_flatten"))
    return layers


CRITIC_FEATURES = 50  # the image critic's features beside the actions (SAC-AE's and DrQ's 50)


class EncodedConcat(tf.keras.layers.Layer):
    """A critic's first layer on images: (observations, actions) -> the observations' features
    from the critic's own encoder, projected to CRITIC_FEATURES and normalized (LayerNorm, then
    tanh), with the actions beside them.

    Why the projection (SAC-AE's and DrQ's): a flat conv output has thousands of features
    (MinAtar's 1,600, a 16x16 frame's 3,136), among which the two or so action inputs would
    be a vanishing share of the first Dense layer's input. The critic is never exported, so
    its LayerNorm costs the policy files nothing."""

    def __init__(self, encoder: list, name: str, **kwargs):
        super().__init__(name=name, **kwargs)
        self.encoder = encoder
        self.projection = tf.keras.layers.Dense(CRITIC_FEATURES, name=f"{name}_projection")
        self.norm = tf.keras.layers.LayerNormalization(name=f"{name}_norm")

    def call(self, inputs, training=False):
        features, actions = inputs
        for layer in self.encoder:
            features = layer(features, training=training)
        features = tf.tanh(self.norm(self.projection(features)))
        return tf.concat([features, actions], axis=-1)


def critic_input(observation: ObservationSpec | None, name: str, sparse: bool):
    """A critic's first layer: (observations, actions) concatenated, through an encoder first
    for images. Vectors keep their plain concat (their runs' layer lists stay as they were)."""
    if observation is not None and observation.is_image:
        encoder = image_encoder(observation, f"{name}_encoder", sparse)
        return EncodedConcat(encoder, name=f"{name}_features")
    return tf.keras.layers.Lambda(lambda inputs: tf.concat(inputs, axis=-1), name="concat")


def critic_encoder(critic_network) -> list:
    """An image actor's first layers: its critic's encoder (the same layer objects); [] for a
    vector critic. The actor runs them but does not train them (ReadsCriticEncoder).

    Why shared and trained by the critic alone, as SAC-AE (Yarats et al., 2019) and DrQ
    (Kostrikov et al., 2020) do: the critic's TD error says what in the frame matters; the
    actor's gradient (dQ/da through the actor) is a weak teacher for convolutions, and the
    actor's optimizer would move the critic's features to raise Q. On
    EdgeRL/BrightPatchPoint-v0, trained on recorded random actions, TD3 so built earned 14.7
    of 16 after 1,000 updates (docs/pixels.md)."""
    first = critic_network.layers[0]
    return list(first.encoder) if isinstance(first, EncodedConcat) else []


class ReadsCriticEncoder:
    """For an actor network whose first layers are its critic's encoder (`shared_encoder`):
    their weights are saved, restored and copied with the actor, but they are not among its
    trainable weights, so neither its optimizer nor TF-Agents' actor update touches them."""

    shared_encoder: list

    def _shared_weights(self) -> list:
        return [weight for layer in self.shared_encoder for weight in layer.weights]

    @property
    def trainable_weights(self):
        shared = {id(weight) for weight in self._shared_weights()}
        return [weight for weight in super().trainable_weights if id(weight) not in shared]

    @property
    def non_trainable_weights(self):  # so `variables` (and soft target updates) keep them
        known = {id(weight) for weight in super().non_trainable_weights}
        return super().non_trainable_weights + [
            weight for weight in self._shared_weights() if id(weight) not in known]


class SequentialActor(ReadsCriticEncoder, sequential.Sequential):
    """A Sequential actor whose first `shared` layers are its critic's encoder (none for
    vector observations)."""

    def __init__(self, layers, input_spec=None, name=None, shared: int = 0):
        super().__init__(layers, input_spec=input_spec, name=name)
        self.shared_encoder = list(layers[:shared])


class DuelingQNetwork(network.Network):
    """Q(s, a) = V(s) + A(s, a) - mean_a A(s, a) for DQN (Wang et al., 2016).

    Why dueling here: a trained CartPole Q-network outputs values near 1/(1 - gamma) whose
    differences between actions are a fraction of a percent of their size, below what int8
    weights and activations resolve. Actors only need argmax_a Q = argmax_a A, so the
    exported network is the trunk plus the advantage stream, whose scale is the gaps' own.
    """

    def __init__(self, observation_spec, num_actions: int, hidden: tuple[int, ...],
                 sparse: bool = False, name: str = "DuelingQNetwork",
                 observation: ObservationSpec | None = None):
        super().__init__(input_tensor_spec=observation_spec, state_spec=(), name=name)
        # Images go through a convolutional encoder first. It is made here, not passed in:
        # TF-Agents makes the target network by calling this constructor again.
        encoder = (image_encoder(observation, "q_encoder", sparse)
                   if observation is not None and observation.is_image else [])
        self.trunk = [*encoder, *dense_stack(hidden[:-1], "q_trunk", sparse)]
        self.value_layers = dense_stack(hidden[-1:], "q_value", sparse) + [
            dense(1, None, "q_value_out", sparse)
        ]
        self.advantage_layers = dense_stack(hidden[-1:], "q_advantage", sparse) + [
            dense(num_actions, None, "q_advantage_out", sparse),
            tf.keras.layers.Lambda(
                lambda a: a - tf.reduce_mean(a, axis=-1, keepdims=True), name="centered"
            ),
        ]

    def call(self, observations, step_type=None, network_state=(), training=False):
        features = observations
        for layer in self.trunk:
            features = layer(features, training=training)
        value, advantage = features, features
        for layer in self.value_layers:
            value = layer(value, training=training)
        for layer in self.advantage_layers:
            advantage = layer(advantage, training=training)
        return value + advantage, network_state

    @property
    def greedy_layers(self) -> list:
        """The layers whose output has the same argmax as Q: trunk, then advantage stream."""
        return [*self.trunk, *self.advantage_layers]


def deterministic_actor(observation_spec, action_spec, hidden: tuple[int, ...], sparse: bool,
                        encoder: list = ()):
    """mu(s) for TD3 and D4PG: (`encoder`, for images,) hidden ReLU layers, tanh output scaled
    to the action bounds."""
    low = tf.constant(action_spec.minimum, tf.float32)
    high = tf.constant(action_spec.maximum, tf.float32)
    dim = action_spec.shape.num_elements()
    layers = [*encoder, *dense_stack(hidden, "actor", sparse)] + [
        dense(dim, "tanh", "actor_out", sparse),
        tf.keras.layers.Lambda(lambda u: low + (u + 1.0) * 0.5 * (high - low), name="to_bounds"),
    ]
    return SequentialActor(layers, input_spec=observation_spec, name="ActorNetwork",
                           shared=len(encoder))


def critic(observation_spec, action_spec, hidden: tuple[int, ...], name: str, sparse: bool,
           observation: ObservationSpec | None = None):
    """Q(s, a) for TD3 and SAC: the concatenated inputs through ReLU layers to one value."""
    layers = (
        [critic_input(observation, name, sparse)]
        + dense_stack(hidden, name, sparse)
        + [
            dense(1, None, f"{name}_value", sparse),
            tf.keras.layers.Lambda(lambda q: tf.squeeze(q, -1), name="squeeze"),
        ]
    )
    return sequential.Sequential(
        layers, input_spec=(observation_spec, action_spec), name=name
    )


def distributional_critic(observation_spec, action_spec, hidden: tuple[int, ...], atoms: int,
                          name: str, sparse: bool, observation: ObservationSpec | None = None):
    """Z(s, a) for D4PG: the concatenated inputs through ReLU layers to logits over atoms."""
    layers = (
        [critic_input(observation, name, sparse)]
        + dense_stack(hidden, name, sparse)
        + [dense(atoms, None, f"{name}_logits", sparse)]
    )
    return sequential.Sequential(
        layers, input_spec=(observation_spec, action_spec), name=name
    )


class SquashedGaussianActor(ReadsCriticEncoder, network.DistributionNetwork):
    """pi(.|s) for SAC: tanh(N(mean, std)) scaled to the bounds, mean and log-std from one head."""

    def __init__(self, observation_spec, action_spec, hidden: tuple[int, ...],
                 sparse: bool = False, name: str = "SquashedGaussianActor",
                 encoder: list = ()):
        dim = action_spec.shape.num_elements()
        param_spec = {
            "loc": tensor_spec.TensorSpec(action_spec.shape, tf.float32, name="loc"),
            "scale_diag": tensor_spec.TensorSpec(action_spec.shape, tf.float32, name="scale"),
        }

        def build(**params):
            gaussian = tfp.distributions.MultivariateNormalDiag(**params)
            return distribution_utils.scale_distribution_to_spec(gaussian, action_spec)

        super().__init__(
            input_tensor_spec=observation_spec,
            state_spec=(),
            output_spec=distribution_spec.DistributionSpec(
                build, param_spec, sample_spec=action_spec
            ),
            name=name,
        )
        self.shared_encoder = list(encoder)  # its critic's, for images (critic_encoder)
        self.hidden_layers = [*encoder, *dense_stack(hidden, "actor", sparse)]
        self.head = dense(2 * dim, None, "mean_log_std", sparse)

    def mean_log_std(self, observations, training: bool = False):
        x = observations
        for layer in self.hidden_layers:
            x = layer(x, training=training)
        return self.head(x, training=training)

    def call(self, observations, step_type=(), network_state=(), training=False, mask=None):
        mean, log_std = tf.split(self.mean_log_std(observations, training), 2, axis=-1)
        std = tf.exp(tf.clip_by_value(log_std, LOG_STD_MIN, LOG_STD_MAX))
        return self.output_spec.build_distribution(loc=mean, scale_diag=std), network_state


def squashed_gaussian_outputs(action_spec):
    """SAC's exported outputs from its head's [mean, log-std]: first the greedy action in the
    env's units (tanh of the mean, scaled to the bounds), which any runtime can apply as it
    is; then the head itself, from which actors sample."""
    low = tf.constant(action_spec.minimum, tf.float32)
    high = tf.constant(action_spec.maximum, tf.float32)
    dim = action_spec.shape.num_elements()

    def outputs(mean_log_std):
        action = tf.keras.layers.Lambda(
            lambda x: low + (tf.tanh(x[..., :dim]) + 1.0) * 0.5 * (high - low),
            name="greedy_action")(mean_log_std)
        return [action, mean_log_std]

    return outputs


def export_model(observation: ObservationSpec, layers: list, transform=None):
    """A functional Keras model through `layers` (shared, not copied), for the converter; its
    input takes observations as their kind stores them.

    Pruning wrappers are left out: the model calls the plain layers inside them, whose kernels
    hold exact zeros where the masks are off (the converter cannot take TFMOT's mask ops)."""
    inputs = tf.keras.Input(shape=observation.shape, dtype=tf.as_dtype(observation.dtype),
                            name="observation")
    x = inputs
    for layer in layers:
        x = unwrap(layer)(x)
    if transform is not None:
        x = transform(x)
    return tf.keras.Model(inputs, x)


def mlp_shapes(n_in: int, hidden: tuple[int, ...], n_out: int) -> list[tuple[int, int]]:
    """The Dense kernels of an MLP n_in -> hidden... -> n_out."""
    sizes = [n_in, *hidden, n_out]
    return list(zip(sizes[:-1], sizes[1:], strict=True))
