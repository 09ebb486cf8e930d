"""AdLM's code release beside tfdp: its release job and the report's comparisons.

Declared in the paper's PAPER (kinds "release_job" and "release_comparisons"); the harness
and the report (tfdp.reproduce.releases) find them through tfdp.registry.
"""

from tfdp.reproduce.releases.attribution import Comparison, Toggle
from tfdp.reproduce.releases.jobs import Override, ReleaseJob

# AdLM, MNIST (PrivateDeepLearning AdLM/MNIST/AdLM.py; the script last changed in 15fb1f3).
# Run length: the epoch count (steps = int(60000 / 1800 * epochs + 1)); evaluation every
# `eval_epochs` epochs instead of every 5 (a curve at short budgets).
MNIST_JOB = ReleaseJob(
    name="adlm.mnist",
    repo="haiphanNJIT/PrivateDeepLearning",
    commit="77fb35740f820d24b1cba94174f9ce7b7eee3e7c",
    folder="AdLM/MNIST",
    script="AdLM.py",
    settings={"epochs": "12", "eval_epochs": "1"},
    overrides=(
        Override("AdLM.py", "epochs = 2400;", "epochs = {epochs};"),
        Override("AdLM.py", "if i % int(5*step_for_epoch) == 0:",
                 "if i % int({eval_epochs}*step_for_epoch) == 0:"),
    ),
    data_dir="MNIST_data",
    curve_pattern=r"^step \t (?P<step>\d+) \t test accuracy \t (?P<accuracy>[0-9.eE+-]+)\s*$",
    final_pattern=r"^test accuracy (?P<accuracy>[0-9.eE+-]+)\s*$",
    published=None,
)


# The comparisons in the report's section "The authors' releases beside tfdp", in this order
# among the paper's (tfdp.reproduce.releases.attribution.comparisons orders the papers').
COMPARISONS = (
    Comparison(
        key="adlm_mnist_e6", title="AdLM, MNIST", job="adlm.mnist",
        release_glob="adlm_mnist_release_e6_seed*.json",
        tfdp_glob="adlm_mnist_tfdp_closest_adam_e6_seed*.json",
        budget="6 epochs of |L| = 1,800 (release 201 steps, tfdp 198)", release_steps="201",
        identical=False,
        settings_note="the release's own settings on both sides (eps 0.075 + 0.075 + 0.15, "
                      "Adam 3e-4, batch-shared input noise redrawn every step, batch norm + "
                      "clip, [-1, 1] pixels; flags/releases/adlm_mnist_release.flags) with its "
                      "objective exactly (--adlm_fm_mode=ref_code_broadcast), its shipped "
                      "relevance map (--adlm_relevance_file), its Delta_F "
                      "(--adlm_delta_f=ref_code) and its Adam (--adlm_adam_epsilon: the "
                      "release's epsilon on its batch-sum loss). Not identical: tfdp trains on all 60,000 "
                      "training images (the release's reader on the last 55,000, so 3.4 "
                      "passes instead of 3.6 at 198 steps) and takes test batch statistics "
                      "over batches of 1,000 (the release over all 10,000); docs/reproduce.md",
        published=90.2, published_text="AdLM, eps 0.25, Fig. 4a (the release's setting is eps "
                                       "0.3)",
        paper="adlm", rows=("adlm.mnist.adlm.eps0.25", "adlm.mnist.adlm.eps0.5",
                            "adlm.mnist.adlm.mean_eps"),
        toggles=(
            Toggle("base", "adlm_mnist_tfdp_e6_seed*.json",
                   "without the three (tfdp's --adlm_fm_mode=ref_code adds the noise term "
                   "once, 18,000 times less than the release; a relevance map computed by "
                   "tfdp; Delta_F 1,950)"),
            Toggle("relfile", "adlm_mnist_tfdp_relfile_e6_seed*.json",
                   "only the relevance file"),
            Toggle("no_adam", "adlm_mnist_tfdp_closest_e6_seed*.json",
                   "all but the Adam epsilon"))),
    Comparison(
        key="adlm_mnist_e40", title="AdLM, MNIST, longer", job="adlm.mnist",
        release_glob="adlm_mnist_release_e40_seed*.json",
        tfdp_glob="adlm_mnist_tfdp_closest_adam_e40_seed*.json",
        budget="40 epochs of |L| = 1,800 (release 1,334 steps, tfdp 1,320; the paper runs "
               "2,400 epochs)", release_steps="1334", identical=False,
        settings_note="those of the 6-epoch comparison above, run 40 epochs "
                      "(`--set=epochs=40` and `--epochs=40`): as long as a release run fits "
                      "in about an hour on 2 cores",
        published=90.2, published_text="AdLM, eps 0.25, Fig. 4a (the release's setting is eps "
                                       "0.3)",
        paper="adlm", rows=("adlm.mnist.adlm.eps0.25",), scale_of="adlm_mnist_e6"),
)
