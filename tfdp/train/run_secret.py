"""The run's secret key and the random streams derived from it.

Every random stream of a run (setup, batch layouts, weight initialisation, step seeds, the
public split, the noise layers) is derived from one run key (principle 5). The key is a
secret: it lives only in the checkpoint (`run_secret`), never in config.json, flags.txt,
logs, TensorBoard or anything exported.
"""

from __future__ import annotations

import secrets

import numpy as np
import tensorflow as tf

from tfdp.train import integrity
from tfdp.train.base import Method, derive_seed

__all__ = ["SECRET_BITS", "os_entropy_key", "encode_secret", "decode_secret", "restore_secret",
           "epoch_batches", "public_split_indices", "STREAM_SETUP", "STREAM_SHUFFLE",
           "STREAM_FIXED", "STREAM_INIT", "STREAM_STEPS", "STREAM_PUBLIC", "STREAM_LAYERS"]

# Stream identifiers: every random stream of a run is derived from one run key.
STREAM_SETUP, STREAM_SHUFFLE, STREAM_FIXED, STREAM_INIT, STREAM_STEPS = 1, 2, 3, 4, 5
STREAM_PUBLIC, STREAM_LAYERS = 6, 7
# Bits of OS entropy in a run key drawn when no --seed is given (issue: >= 128).
SECRET_BITS = 256


def os_entropy_key() -> int:
    """A fresh run key of `SECRET_BITS` bits from OS entropy (used when no --seed is given)."""
    return secrets.randbits(SECRET_BITS)


def encode_secret(run_key: int, user_supplied: bool) -> bytes:
    """The checkpoint's run_secret: the key and whether the user supplied it (--seed)."""
    return (f"user:{int(run_key)}" if user_supplied else f"os:{int(run_key):x}").encode()


def decode_secret(value: bytes, path: str) -> tuple[int, bool]:
    """(run key, user supplied) from the checkpoint's run_secret."""
    text = value.decode("ascii", "replace")
    kind, _, body = text.partition(":")
    try:
        if kind == "user":
            return int(body), True
        if kind == "os":
            return int(body, 16), False
    except ValueError:
        pass
    raise ValueError(f"{path}: the checkpoint's run secret is corrupt")


def restore_secret(latest: str, secret_var: tf.Variable, seed: int | None
                   ) -> tuple[int, bool, tf.Variable | None]:
    """The run key from the checkpoint `latest` (`run_secret`, or an older run's `run_key`).

    Args:
      latest: the checkpoint's path prefix.
      secret_var: the run's `run_secret` variable; restored from the checkpoint, or set from
        an older run's scalar key.
      seed: the resume's --seed (None when not given).

    Returns:
      (run key, whether the user supplied it, the older run's `run_key` variable or None).

    Raises:
      ValueError: naming the checkpoint when it cannot be read or its secret is corrupt.
    """
    names = integrity.checkpoint_names(latest)
    try:
        if "run_secret" in names:
            tf.train.Checkpoint(run_secret=secret_var).restore(latest).expect_partial()
            return decode_secret(secret_var.numpy(), latest) + (None,)
        # A checkpoint written before the secret key: a 63-bit key (kept as it was).
        key_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="run_key")
        tf.train.Checkpoint(run_key=key_var).restore(latest).expect_partial()
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise ValueError(f"{latest}: cannot read the checkpoint "
                         f"({integrity.first_line(e)})") from None
    key = int(key_var.numpy())
    user_supplied = seed is not None and int(seed) == key
    secret_var.assign(encode_secret(key, user_supplied))
    return key, user_supplied, key_var


def epoch_batches(method: Method, run_key: int, epoch: int) -> list:
    """The batches `method` yields for `epoch` of the run with key `run_key`.

    The method must be attached (`Method.attach`); its `batches` gets the epoch's seeded
    stream, so the same run key always gives the same batches.
    """
    rng = np.random.default_rng(derive_seed(run_key, STREAM_SHUFFLE, epoch))
    return list(method.batches(epoch, rng))


def public_split_indices(num_all: int, num_public: int, run_key: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """(public, private) sorted record indices of a run's public split, chosen from its key."""
    perm = np.random.default_rng(derive_seed(run_key, STREAM_PUBLIC)).permutation(num_all)
    return np.sort(perm[:num_public]), np.sort(perm[num_public:])
