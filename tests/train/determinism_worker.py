"""Trains tiny seeded runs of the given methods in this process (tests/train/test_determinism.py).

    python tests/train/determinism_worker.py OUT_DIR METHOD [METHOD ...]

Each run goes through tfdp-train's own resolve/execute path on the bundled sample data and
writes its run directory to OUT_DIR/METHOD; it then prints the memory-optimizer level its
tf.function calls were optimised with.
"""

import sys

from tfdp import tf_options
from tfdp.apps import train as train_app

_BASE = {"dataset": "sample", "num_train": 100, "num_test": 20, "epochs": 1, "seed": 5,
         "verbose": 0, "batch_size": 50}
# Per method: generic flag overrides, method options (the smallest architectures).
RUNS = {
    "nonprivate": ({}, {}),
    "dpsgd": ({"epsilon": 5.0}, {"dpsgd_model": "mlp"}),
    "adlm": ({"epsilon": 1.0}, {"adlm_aux_epochs": 1, "adlm_aux_model": "mlp"}),
    "secure_sgd": ({"epsilon": 2.0}, {"hgm_model": "small"}),
    "stobatch": ({"epsilon": 2.0}, {"stobatch_attack_iters": 2,
                                    "stobatch_architecture": "tiny",
                                    "stobatch_hidden_units": 8}),
}


def main(out_dir: str, methods: list[str]) -> None:
    for name in methods:
        overrides, options = RUNS[name]
        values = dict(_BASE, method=name, model_dir=f"{out_dir}/{name}", **overrides)
        result = train_app.execute(train_app.resolve(values, options))
        assert result.steps > 0, name
    # What grappler received for this process's tf.function calls.
    print(f"memory_optimization={tf_options.memory_optimization_level()}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
