"""Training methods over one shared loop (tf.distribute, checkpoints, run directory)."""
