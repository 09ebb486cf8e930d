"""Secure-SGD's code release beside tfdp: its release job and the report's comparison.

Declared in the paper's PAPER (kinds "release_job" and "release_comparisons"); the harness
and the report (tfdp.reproduce.releases) find them through tfdp.registry.
"""

from tfdp.reproduce.releases.attribution import Comparison
from tfdp.reproduce.releases.jobs import Override, ReleaseJob

# Secure-SGD (HGM), MNIST (SecureSGD MNIST/SecureSGD.py). The release trains until its moments
# accountant reaches delta = 1e-5 at eps 1.0 (a step cap of 1.8M) after 4,000 noise-free steps
# for the redistribution vector, and prints only one final line. Overrides: the training step
# cap `steps`, the pre-training steps, the Monte-Carlo draws per attack, the attacks on or off,
# and a test-accuracy line every `eval_every` steps, evaluated exactly as the release's final
# benign accuracy (the fixed training noise fed, dropout off).
_SECURE_SGD_EVAL = (
    "        if i % 1000 == 0:\n"
    "            print(i, spent_eps_deltas)\n")
MNIST_JOB = ReleaseJob(
    name="secure_sgd.mnist",
    repo="haiphanNJIT/SecureSGD",
    commit="1115cc1f50c41117315c6bb01e3b7e884ee8b429",
    folder="MNIST",
    script="SecureSGD.py",
    settings={"steps": "2000", "pretrain_steps": "4000", "draws": "2000", "attacks": "True",
              "eval_every": "200"},
    overrides=(
        Override("SecureSGD.py", "num_steps = 1800000", "num_steps = {steps}"),
        Override("SecureSGD.py", "for i in range(4000):", "for i in range({pretrain_steps}):"),
        Override("SecureSGD.py", "for n_draws in range(0, 2000):",
                 "for n_draws in range(0, {draws}):"),
        Override("SecureSGD.py",
                 "attack_switch = {'fgsm':True, 'ifgsm':True, 'deepfool':False, 'mim':True, "
                 "'spsa':False, 'cwl2':False, 'madry':True, 'stm':False}",
                 "attack_switch = {{'fgsm':{attacks}, 'ifgsm':{attacks}, 'deepfool':False, "
                 "'mim':{attacks}, 'spsa':False, 'cwl2':False, 'madry':{attacks}, "
                 "'stm':False}}"),
        Override("SecureSGD.py", _SECURE_SGD_EVAL,
                 _SECURE_SGD_EVAL + "        if (i + 1) % {eval_every} == 0:\n"
                 "            print('step \\t %d \\t test accuracy \\t %g' % (i + 1, "
                 "accuracy_x.eval(feed_dict={{x: mnist.test.images, y_: mnist.test.labels, "
                 "keep_prob: 1.0, noise: (__noiseE + __noiseH)/2}})))\n"),
    ),
    data_dir="",
    make_dirs=("results",),
    curve_pattern=r"^step \t (?P<step>\d+) \t test accuracy \t (?P<accuracy>[0-9.eE+-]+)\s*$",
    final_pattern=r"benign_acc: (?P<accuracy>[0-9.eE+-]+)",
)


# The comparisons in the report's section "The authors' releases beside tfdp", in this order
# among the paper's (tfdp.reproduce.releases.attribution.comparisons orders the papers').
COMPARISONS = (
    Comparison(
        key="secure_sgd_mnist_s3840", title="Secure-SGD (HGM), MNIST", job="secure_sgd.mnist",
        release_glob="secure_sgd_mnist_release_s3840_seed*.json",
        tfdp_glob="secure_sgd_mnist_tfdp_s3840_seed*.json",
        budget="3,840 steps of 125 after 4,000 pre-training steps", release_steps="3840",
        identical=True,
        settings_note="the release's settings on both sides "
                      "(flags/releases/secure_sgd_mnist_release.flags): its network (FC 25, "
                      "dropout 0.5) with conv1 trained freely, per-layer clipping of the "
                      "batch-mean gradient (C = 0.001, noise multiplier 4, SGD 0.1), its "
                      "(EGM + HGM) / 2 noise drawn once with r and Delta from 4,000 steps of "
                      "the same training, and the test accuracy with that fixed draw fed; "
                      "tfdp trains on the first 55,000 training images, the release's reader "
                      "on the last 55,000 (docs/reproduce.md)",
        published=None, published_text="the HGM paper publishes no clean MNIST accuracy for "
                                       "Secure-SGD (only gaps under attack)",
        paper="hgm", rows=("hgm.mnist.secure_sgd_minus_dpsgd", "hgm.mnist.secure_sgd_rise",
                           "hgm.mnist.secure_sgd_minus_secure_sgd_agm")),
)
