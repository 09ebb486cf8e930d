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
  closed_forms the rows' closed-form jobs (Figure 4, Table 4's "Expect" row)
  extract      the rows' extractors (Figures 5-6, Tables 2 and 4)
  subcommands  tfdp-audit samplers / gpm-hist / gpm-dpsgd / gpm-bounds / gpm-precision
  bench        tfdp-bench gpm (Figure 7)
  figures      Figures 5 and 6 in the reproduction report
"""

from tfdp import registry


def _subcommand(name: str, attribute: str) -> registry.Extension:
    return registry.Extension("subcommand", name, f"tfdp.papers.gpm.subcommands:{attribute}")


def _extractor(name: str) -> registry.Extension:
    return registry.Extension("extractor", name, f"tfdp.papers.gpm.extract:{name}")


# GPM adds no training method: its experiments are closed forms, games and audits.
PAPER = registry.Paper(
    name="gpm", title="GPM (Sun and He)", rows="tfdp.papers.gpm.rows:rows",
    extensions=(
        _subcommand("samplers", "SAMPLERS"), _subcommand("gpm-hist", "HIST"),
        _subcommand("gpm-dpsgd", "DPSGD"), _subcommand("gpm-bounds", "BOUNDS"),
        _subcommand("gpm-precision", "PRECISION"),
        _extractor("gpm_hist_cell"), _extractor("gpm_hist_l2"), _extractor("gpm_dpsgd_cells"),
        _extractor("gpm_dpsgd_gap"), _extractor("gpm_dpsgd_dq"),
        registry.Extension("audit_cases", "gpm", "tfdp.papers.gpm.experiments:audit_cases"),
        registry.Extension("benchmark", "gpm", "tfdp.papers.gpm.bench:OPTIONS"),
        registry.Extension("figure", "gpm_success_vs_beta",
                           "tfdp.papers.gpm.figures:success_vs_beta"),
    ))
