"""White-box one-run audit of DP-SGD: Dirac gradient canaries and the auditor's view of every step.

Steinke, Nasr, Jagielski 2023, white-box setting: canary i is a record whose clipped gradient is
the Dirac vector C e_{j_i} (all zero but coordinate j_i, norm exactly the clip norm C), at a
coordinate of its own. Each canary is a member with probability 1/2; a member joins every
Poisson lot with the lots' sampling rate q, like any record. The auditor sees every released
noisy gradient sum (the threat model DP-SGD's guarantee covers: the whole sequence of noisy
sums, Abadi et al. 2016) and scores canary i by the log-likelihood ratio of the coordinate
j_i across steps, sum_t log(1 - q + q exp((x_t C - C^2 / 2) / (sigma C)^2)), the optimal
test for a Poisson-subsampled Gaussian when the other records contribute nothing there.

The noise is added once to the lot's sum and is additive, so adding the canaries' Dirac
gradients to the noisy sum gives the same distribution as adding them before the noise:
this module does not touch DP-SGD's clipping or noise, it subclasses the method and adds
the canaries' contribution in `train_step`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from tfdp.train import dpsgd, privatize

_CANARY_SALT = 90_001  # folds the step seed into the canaries' Poisson draws


def dirac_dpsgd_class(coords: np.ndarray, included: np.ndarray, store: dict) -> type:
    """A DPSGD subclass that trains with Dirac canaries and records their scores.

    Args:
      coords: [m] distinct flat coordinates (over the concatenated trainable variables).
      included: [m] membership bits.
      store: filled with "scores" (a tf.Variable [m], float64) at build time, read after
        training.

    Returns:
      The class (same flags and ledger as dpsgd).
    """
    coords = np.asarray(coords, np.int64)
    member = np.asarray(included, bool)

    class DiracCanaryDPSGD(dpsgd.DPSGD):
        """DP-SGD with Dirac gradient canaries (white-box audit)."""

        def build(self) -> dict:
            objects = super().build()
            total = sum(int(np.prod(v.shape)) for v in self.model.trainable_variables)
            if coords.size and int(coords.max()) >= total:
                raise ValueError(f"canary coordinate {int(coords.max())} outside the model's "
                                 f"{total} parameters")
            self._canary_scores = tf.Variable(tf.zeros([coords.size], tf.float64),
                                              trainable=False)
            store["scores"] = self._canary_scores
            store["num_params"] = total
            return objects

        def train_step(self, ctx, x, y):
            model = self.model
            variables = model.trainable_variables

            def example_loss(xi, yi):
                logits = model(xi, training=True)
                return dpsgd.per_example_cross_entropy(yi, logits)[0], logits

            grads, metrics = privatize.dpsgd_gradients(
                ctx, model, variables, x, y, example_loss, l2_clip=self.settings.l2_clip,
                noise_multiplier=self.noise_multiplier, clipping=self.clipping_path(),
                mask=ctx.row_mask() if self.pads_lots() else None)
            batch = float(ctx.global_batch_size)
            q = batch / float(self._require_spec().num_train)  # the lots' Poisson rate
            c = float(self.settings.l2_clip)
            sampled = tf.random.stateless_uniform(
                [coords.size], seed=ctx.step_seed(_CANARY_SALT), dtype=tf.float64) < q
            joined = tf.logical_and(sampled, tf.constant(member))
            # Dirac gradients C e_j of the members in this lot, divided by the lot size like
            # the rest of the sum (privatize.dpsgd_gradients), added once (replica 0).
            add = tf.cast(joined, tf.float32) * (c / batch) * ctx.first_replica_mask()
            flat = tf.concat([tf.reshape(g, [-1]) for g in grads], axis=0)
            flat = tf.tensor_scatter_nd_add(flat, tf.constant(coords[:, None]), add)
            # The auditor's view: the released noisy sum at each canary's coordinate.
            seen = tf.cast(tf.gather(flat, tf.constant(coords)), tf.float64) * batch
            sigma_c = float(self.noise_multiplier) * c
            llr = tf.math.log1p(q * tf.math.expm1((seen * c - c * c / 2.0) / sigma_c ** 2))
            self._canary_scores.assign_add(llr)
            out, start = [], 0
            for v in variables:
                n = int(np.prod(v.shape))
                out.append(tf.reshape(flat[start:start + n], v.shape))
                start += n
            self.optimizer.apply_gradients(zip(out, variables))
            return metrics

    return DiracCanaryDPSGD


def choose_coordinates(num_params: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """m distinct random coordinates among num_params."""
    if m > num_params:
        raise ValueError(f"num_canaries: {m} Dirac canaries need {m} of the model's "
                         f"{num_params} parameters")
    return np.sort(rng.choice(num_params, size=m, replace=False))


def count_parameters(method: Any, input_shape: tuple, num_classes: int) -> int:
    """Trainable parameters of the model the method builds (to place the coordinates)."""
    model = method.build_model(tuple(input_shape), int(num_classes))
    model(tf.zeros((1,) + tuple(input_shape), tf.float32), training=False)
    return sum(int(np.prod(v.shape)) for v in model.trainable_variables)
