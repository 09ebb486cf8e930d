"""Adversarial attacks (FGSM, I-FGSM, MIM, Madry) over CleverHans' TF2 API."""
