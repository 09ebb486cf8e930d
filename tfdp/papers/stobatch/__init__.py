"""StoBatch: DP adversarial learning with certified robustness (Phan et al., ICML 2020).

Modules:
  method  the StoBatch trainer (Algorithms 1-2; one or many replicas)
  models  the auto-encoder and the network above it (Section 6)
  losses       the Taylor loss, the adversarial objective, Delta_R, Delta_L2 (Eq. 9, Lemma 2, 4)
  budgets      auto-encoder sensitivity, gammas, the budget split (Lemma 2-3, Thm 4, App. P)
  rows    the reproduction rows (Figures 2-4)
  certificate  the certified radius (Eq. 13) and its certificate class
  unsound      the code release's radius options, whose certificates are only claimed
  bench        tfdp-bench stobatch (a StoBatch step against plain adversarial training)
  flagfiles    which flagfile trains StoBatch in a reproduction row
  releases     the code release's job for tfdp-release and its comparisons in the report
"""

from tfdp import registry

PAPER = registry.Paper(
    name="stobatch",
    title="StoBatch (Phan et al., ICML 2020)",
    methods=(
        registry.MethodSpec("stobatch", "tfdp.papers.stobatch.method:StoBatch",
                            "StoBatch: DP + certified robustness with stochastic batches (Phan "
                            "et al., ICML 2020)"),
    ),
    keras_modules=("tfdp.papers.stobatch.models",),
    rows="tfdp.papers.stobatch.rows:rows",
    extensions=(
        registry.Extension("certificate", "stobatch",
                           "tfdp.papers.stobatch.certificate:StoBatch"),
        registry.Extension("unsound_options", "stobatch",
                           "tfdp.papers.stobatch.unsound:unsound_options"),
        registry.Extension("benchmark", "stobatch", "tfdp.papers.stobatch.bench:OPTIONS"),
        registry.Extension("flagfile_rule", "stobatch",
                           "tfdp.papers.stobatch.flagfiles:train_command"),
        registry.Extension("noisy_method", "stobatch", "tfdp.papers.stobatch.method:StoBatch"),
        registry.Extension("card_fields", "stobatch", "tfdp.papers.stobatch.card:CARD_FIELDS"),
        registry.Extension("release_job", "stobatch.mnist",
                           "tfdp.papers.stobatch.releases:MNIST_JOB"),
        registry.Extension("release_comparisons", "stobatch",
                           "tfdp.papers.stobatch.releases:COMPARISONS"),
    ),
)
