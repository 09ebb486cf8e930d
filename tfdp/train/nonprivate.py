"""Non-private training (the upper-bound sanity baseline; docs/paper-to-code.md)."""

from __future__ import annotations

import keras
import tensorflow as tf

from tfdp import options, registry
from tfdp.certify import smoothing
from tfdp.models import common
from tfdp.train.base import Method
from tfdp.train.metrics import step_metrics  # noqa: F401  (also importable from here)

@options.declare("nonprivate_")
class NonPrivateConfig:
    """Non-private baseline settings (the nonprivate_* flags without the prefix): the single
    declaration of their types, defaults, help and checks. `NonPrivateConfig(...).as_options()`
    is a `TrainConfig.options` mapping."""

    model: str = options.field(
        "cnn", "Architecture of the non-private baseline: a small CNN or an MLP.",
        choices=("cnn", "mlp"))


OPTIONS = NonPrivateConfig.OPTIONS  # the nonprivate_* flags (tfdp-train defines them from this)


def per_example_cross_entropy(y: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Softmax cross-entropy of integer labels against logits, one value per example."""
    return keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)


# The shared baselines' networks, then those the papers add (registry kind "baseline_model",
# e.g. AdLM's "adlm_cnn"), read when this module is imported (they are flag choices).
_SHARED_MODELS = ("cnn", "mlp")
BASELINE_MODELS = _SHARED_MODELS + tuple(registry.extensions("baseline_model"))


def build_baseline_model(kind: str, input_shape, num_classes: int) -> keras.Model:
    """The model of a baseline: "cnn" (a small CNN), "mlp", or a network a paper adds (e.g.
    "adlm_cnn", AdLM's MNIST network with per-example layers only, the AdLM paper's pSGD
    network; registry kind "baseline_model").

    Raises:
      ValueError: if `kind` is unknown.
    """
    if kind == "cnn":
        return common.small_cnn(input_shape, num_classes)
    if kind == "mlp":
        return common.mlp(input_shape, num_classes, hidden=(128,))
    added = registry.extensions("baseline_model")
    if kind in added:
        return added[kind].load()(input_shape, num_classes)
    raise ValueError(f"model: unknown baseline model {kind!r}; choose one of {BASELINE_MODELS}")


class NonPrivate(Method):
    """Plain minibatch training with the exact cross-entropy loss; spends no privacy budget."""

    name = "nonprivate"
    default_flags = {"epochs": 2, "batch_size": 64, "learning_rate": 1e-3, "optimizer": "adam"}
    settings_class = NonPrivateConfig
    takes_smoothing = True  # --smoothing_sigma: input noise (Cohen et al. 2019)

    def validate(self) -> None:
        if self.config.epsilon is not None:
            raise ValueError("--epsilon: the nonprivate method spends no privacy budget; "
                             "do not set --epsilon")

    def build_model(self, input_shape, num_classes):
        return build_baseline_model(self.settings.model, input_shape, num_classes)

    def certification_config(self):
        sigma = self.config.common.smoothing_sigma
        return smoothing.certification(sigma) if sigma else None

    def train_step(self, ctx, x, y):
        model, global_batch_size = self.model, ctx.global_batch_size
        # --smoothing_sigma: Gaussian noise on each example's input (Cohen et al. 2019).
        x = smoothing.training_noise(ctx, x, self.config.common.smoothing_sigma)
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            # The replica's share of the global mean loss (tf.nn.compute_average_loss).
            loss = tf.nn.compute_average_loss(per_example_cross_entropy(y, logits),
                                              global_batch_size=global_batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        # The Keras 3 optimizer sums the per-replica gradients across replicas.
        self.optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return step_metrics(loss, logits, y, global_batch_size)
