"""AdLM: the Adaptive Laplace Mechanism (Phan et al., ICDM 2017).

Modules:
  method     the AdLM and ILM trainers (Algorithm 1; ILM: uniform budgets, no relevance)
  models     the MNIST and CIFAR-10 networks (Section 5)
  relevance  layer-wise relevance propagation and its private average (Eq. 4-12, 16)
  losses     the Taylor loss, its functional-mechanism perturbation, Delta_F (Eq. 25, Lemma 5)
  budgets    relevance sensitivity, budget weights, per-feature scales (Lemma 1, Eq. 16)
  rows       the reproduction rows (Section 5's figures)
  figures    Figure 4a in the reproduction report
  flagfiles  which flagfile trains AdLM in a reproduction row
  releases   the code release's job for tfdp-release and its comparisons in the report
"""

from tfdp import registry

PAPER = registry.Paper(
    name="adlm",
    title="AdLM (Phan et al., ICDM 2017)",
    methods=(
        registry.MethodSpec("adlm", "tfdp.papers.adlm.method:AdLM",
                            "Adaptive Laplace Mechanism, AdLM (Phan et al., ICDM 2017), the "
                            "corrected version"),
        registry.MethodSpec("ilm", "tfdp.papers.adlm.method:ILM",
                            "Identical Laplace Mechanism: AdLM with uniform budgets and no "
                            "relevance step"),
    ),
    keras_modules=("tfdp.papers.adlm.models",),
    rows="tfdp.papers.adlm.rows:rows",
    extensions=(
        # The pSGD baseline's network (--dpsgd_model=adlm_cnn / --nonprivate_model=adlm_cnn).
        registry.Extension("baseline_model", "adlm_cnn",
                           "tfdp.papers.adlm.models:mnist_per_example_model"),
        registry.Extension("figure", "adlm_accuracy_vs_eps",
                           "tfdp.papers.adlm.figures:accuracy_vs_eps"),
        registry.Extension("flagfile_rule", "adlm", "tfdp.papers.adlm.flagfiles:train_command"),
        registry.Extension("release_job", "adlm.mnist", "tfdp.papers.adlm.releases:MNIST_JOB"),
        registry.Extension("release_comparisons", "adlm",
                           "tfdp.papers.adlm.releases:COMPARISONS"),
    ),
)
