"""Adversarial attacks (FGSM, I-FGSM, MIM, Madry) over CleverHans' TF2 API."""

from attacks.core import (ATTACKS, ensemble, fgsm, ifgsm, madry, mim, rescale_size,
                          run_attack)

__all__ = ["ATTACKS", "ensemble", "fgsm", "ifgsm", "madry", "mim", "rescale_size",
           "run_attack"]
