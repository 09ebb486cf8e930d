"""The Gaussian pancake mechanism (GPM): backdoored research and attack code, kept apart.

GPM (Sun and He) replaces the Gaussian noise of the Gaussian mechanism by scaled
homogeneous-CLWE noise that the key holder can tell apart. Nothing here is a default of
tfdp or exported from `tfdp.mechanisms`; import the submodules explicitly.

Submodules:
  pancake      the mechanism, the key holder's attack, success oracles and privacy bounds
  experiments  DP-hist game, L2 error, precision check and privacy-bound curves; the key
               holder's attacker for the empirical audits of `tfdp.audit`
  dpsgd        GPM on DP-SGD gradients (MNIST LeNet-5, CIFAR-10 smoke), needs TensorFlow
  defences     random rotation (Haar) and trusted top-up against a backdoored sampler
  rows         the reproduction rows (Figures 4-5, Table 4)
"""

from tfdp import registry

# GPM adds no training method: its experiments are closed forms, games and audits.
PAPER = registry.Paper(name="gpm", title="GPM (Sun and He)", rows="tfdp.papers.gpm.rows:rows")
