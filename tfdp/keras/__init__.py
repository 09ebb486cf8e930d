"""tfdp for a user's own Keras model: DP-SGD through `fit`, per-layer-type clipping registry.

    dp = tfdp.keras.make_private(model, epsilon=3.0, delta=1e-5, epochs=3, batch_size=256)
    dp.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(
        from_logits=True), metrics=["accuracy"])
    dp.fit(x_train, y_train)
    dp.ledger()           # sound epsilon, accountant, what it covers

Certificates and audits: `tfdp.keras.certify` (Cohen et al. randomized smoothing, l2 attacks,
the soundness check) and `tfdp.keras.audit` (the one-run canary audit of a fit run).
"""

from tfdp.keras.layers import LayerRule, register, register_batch_mixing, registered
from tfdp.keras.model import DPModel, PrivacyCallback, make_private

__all__ = ["DPModel", "LayerRule", "PrivacyCallback", "make_private", "register",
           "register_batch_mixing", "registered"]
