"""The model card's fields that StoBatch adds (registry kind "card_fields"): public
parameters of its certificate (StoBatch Eq. 13, Theorem 5) and of its budget (Theorem 4).

`tfdp.export` adds them to the card's allow-list; a key listed nowhere is dropped.
"""

from tfdp.export import ANY

CARD_FIELDS = {
    "certification": {
        **{k: ANY for k in (
            "batch_size", "epsilon1", "d_cert", "delta_rh", "psi", "delta_rx_mode",
            "mu_train", "radius_psi_correction", "radius_divisor", "passes")},
        "budget": {k: ANY for k in (
            "epsilon", "eps1", "eps2", "gamma", "gamma_x", "delta_r", "delta_l2",
            "first_layer_norm", "norm_mode", "fan_in", "beta", "m", "theorem4_total",
            "a22_term", "theorem4_total_with_a22")},
    },
}
