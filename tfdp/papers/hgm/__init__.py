"""HGM: the Heterogeneous Gaussian Mechanism and Secure-SGD (Phan et al., IJCAI 2019).

Modules:
  method          Secure-SGD, Secure-SGD-AGM, PixelDP and HGM_PixelDP trainers (Algorithm 1)
  models          the MNIST / CIFAR-10 networks with the noised first layer
  redistribution  the noise redistribution r (Eq. 7) and the noised layer's sensitivity (Eq. 6)
  figure          Figure 1 (the HGM noise against the classical Gaussian mechanism)
  rows            the reproduction rows (Figures 3-5)
  unsound         the sensitivity modes whose certificates are only claimed
  flagfiles       which flagfile trains each method in a reproduction row
  releases        the Secure-SGD code release's job for tfdp-release and its comparison
The mechanism itself is shared: `tfdp.mechanisms.heterogeneous`.
"""

from tfdp import registry

PAPER = registry.Paper(
    name="hgm",
    title="HGM / Secure-SGD (Phan et al., IJCAI 2019)",
    methods=(
        registry.MethodSpec("secure_sgd", "tfdp.papers.hgm.method:SecureSGD",
                            "Secure-SGD: HGM robustness noise + DP-SGD (Phan et al., IJCAI "
                            "2019, Alg. 1)"),
        registry.MethodSpec("secure_sgd_agm", "tfdp.papers.hgm.method:SecureSGDAGM",
                            "Secure-SGD with the analytic Gaussian mechanism (Balle & Wang "
                            "2018) and uniform r, an HGM baseline"),
        registry.MethodSpec("pixeldp", "tfdp.papers.hgm.method:PixelDP",
                            "PixelDP (Lecuyer et al. 2019): classical Gaussian noise, eps_r <= "
                            "1, no DP"),
        registry.MethodSpec("hgm_pixeldp", "tfdp.papers.hgm.method:HGMPixelDP",
                            "HGM_PixelDP: non-private SGD with HGM robustness noise (Phan et "
                            "al., IJCAI 2019)"),
    ),
    keras_modules=("tfdp.papers.hgm.models",),
    rows="tfdp.papers.hgm.rows:rows",
    extensions=(
        registry.Extension("unsound_options", "hgm", "tfdp.papers.hgm.unsound:unsound_options"),
        *(registry.Extension("flagfile_rule", m, "tfdp.papers.hgm.flagfiles:train_command")
          for m in ("secure_sgd", "secure_sgd_agm", "pixeldp", "hgm_pixeldp")),
        registry.Extension("noisy_method", "secure_sgd", "tfdp.papers.hgm.method:SecureSGD"),
        registry.Extension("card_fields", "hgm", "tfdp.papers.hgm.card:CARD_FIELDS"),
        registry.Extension("noisy_method", "secure_sgd_agm",
                           "tfdp.papers.hgm.method:SecureSGDAGM"),
        registry.Extension("release_job", "secure_sgd.mnist",
                           "tfdp.papers.hgm.releases:MNIST_JOB"),
        registry.Extension("release_comparisons", "hgm", "tfdp.papers.hgm.releases:COMPARISONS"),
    ),
)
