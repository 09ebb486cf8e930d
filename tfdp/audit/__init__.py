"""Noise audits: sampler conformance and empirical DP audits.

Submodules:
  samplers   black-box conformance suite for Gaussian and Laplace noise samplers
  empirical  empirical DP audit (plug-in attacker + Clopper-Pearson -> epsilon lower bound)
  dp_suite   empirical audits of every shipped mechanism (and the papers' own, e.g. GPM's)

The GPM experiments and defences live in `tfdp.papers.gpm`.
"""

DISCLAIMER = ("PASS does not certify the absence of a cryptographic backdoor: a Gaussian "
              "pancake (GPM) sampler with an unknown key in dimension d >= 256 is believed to "
              "pass every efficient black-box test (GPM Thm 3.4). Use open, verified noise code.")
