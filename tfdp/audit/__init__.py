"""Noise audits: sampler conformance, empirical DP audits, GPM experiments and defences.

Submodules:
  samplers   black-box conformance suite for Gaussian and Laplace noise samplers
  empirical  empirical DP audit (plug-in attacker + Clopper-Pearson -> epsilon lower bound)
  gpm        GPM experiments (DP-hist, precision, privacy-bound curves)
  gpm_dpsgd  GPM on DP-SGD gradients (MNIST LeNet-5, CIFAR-10 smoke), needs TensorFlow
  defences   random rotation (Haar) and trusted top-up against a backdoored sampler
"""

DISCLAIMER = ("PASS does not certify the absence of a cryptographic backdoor: a Gaussian "
              "pancake (GPM) sampler with an unknown key in dimension d >= 256 is believed to "
              "pass every efficient black-box test (GPM Thm 3.4). Use open, verified noise code.")
