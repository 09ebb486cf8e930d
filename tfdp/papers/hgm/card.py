"""The model card's fields that HGM adds (registry kind "card_fields"): Secure-SGD's r_stats
keep only the pre-training settings; r's range and the pre-training accuracy (computed on
the training data) stay out.

`tfdp.export` adds them to the card's allow-list; a key listed nowhere is dropped.
"""

from tfdp.export import ANY

CARD_FIELDS = {
    "certification": {
        "r_stats": {k: ANY for k in ("pretrain_epochs", "score_examples", "beta", "mix",
                                     "floor", "public_records")},
    },
}
