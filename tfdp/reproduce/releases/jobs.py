"""The release jobs: which checkout, script and commit, and what the harness overrides.

Each override replaces one exact line fragment of a temporary copy (it must occur exactly once,
so a changed release fails loudly instead of running unmodified). Placeholders `{name}` in the
replacement are filled from the job's settings (defaults below, overridable per run).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

# The four MNIST IDX files, as the releases' own readers name them.
MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
               "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


@dataclasses.dataclass(frozen=True)
class Override:
    """One exact fragment of one file of the temporary copy and its replacement template."""

    file: str
    old: str
    new: str


@dataclasses.dataclass(frozen=True)
class ReleaseJob:
    """A release script, the commit it was read at, and how its output is parsed.

    Attributes:
      name: job id (`<paper>.<dataset>`).
      repo: GitHub owner/name of the release.
      commit: the commit whose files the overrides were written against.
      folder: the script's folder inside the checkout (copied whole).
      script: the script inside `folder`.
      settings: placeholder defaults (each one a run-length or evaluation knob).
      overrides: the edits made on the temporary copy.
      make_dirs: folders the script writes into, created in the copy.
      data_dir: folder (inside the copy) where the release's own reader looks for the MNIST
        files; the harness links tfdp's files there. Empty: the script reads through the shim.
      curve_pattern: regex with groups `step` and `accuracy` for each evaluation line.
      final_pattern: regex with group `accuracy` for the final line, or "".
      accuracy_scale: multiply parsed accuracies by this to get percent.
      extra_metrics: further accuracies the (overridden) script prints, name -> regex with
        groups `step` and `accuracy` (each gives a curve; its last point is the number).
      published: the paper's published accuracy (percent) this job is compared with.
      published_source: where in the paper `published` is stated.
    """

    name: str
    repo: str
    commit: str
    folder: str
    script: str
    settings: Mapping[str, str]
    overrides: tuple[Override, ...]
    data_dir: str
    curve_pattern: str
    make_dirs: tuple[str, ...] = ()
    final_pattern: str = ""
    accuracy_scale: float = 100.0
    extra_metrics: Mapping[str, str] = dataclasses.field(default_factory=dict)
    published: float | None = None
    published_source: str = ""


JOBS: dict[str, ReleaseJob] = {}


def _add(job: ReleaseJob) -> None:
    JOBS[job.name] = job


# AdLM, MNIST (PrivateDeepLearning AdLM/MNIST/AdLM.py; the script last changed in 15fb1f3).
# Run length: the epoch count (steps = int(60000 / 1800 * epochs + 1)); evaluation every
# `eval_epochs` epochs instead of every 5 (a curve at short budgets).
_add(ReleaseJob(
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
))


# Secure-SGD (HGM), MNIST (SecureSGD MNIST/SecureSGD.py). The release trains until its moments
# accountant reaches delta = 1e-5 at eps 1.0 (a step cap of 1.8M) after 4,000 noise-free steps
# for the redistribution vector, and prints only one final line. Overrides: the training step
# cap `steps`, the pre-training steps, the Monte-Carlo draws per attack, the attacks on or off,
# and a test-accuracy line every `eval_every` steps, evaluated exactly as the release's final
# benign accuracy (the fixed training noise fed, dropout off).
_SECURE_SGD_EVAL = (
    "        if i % 1000 == 0:\n"
    "            print(i, spent_eps_deltas)\n")
_add(ReleaseJob(
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
))


# StoBatch, MNIST (StoBatch MNIST/StoBatch.py). The release trains one model per attack size
# in [5, 10, ..., 60] (/100) for 200 epochs of |L| = 2,499 (4,002 steps), crafting the
# adversarial third of every batch with 100-iteration I-FGSM, MIM and Madry, and evaluates
# every 10 epochs after the 10th (benign accuracy from one pass with the training's fixed noise,
# then four attacks with 2,000 draws each). Overrides: one attack size, the epochs, the attack
# iterations (training and evaluation), the evaluation interval (and at every multiple from
# the first), and the attacks in evaluations on or off.
_STOBATCH_EVAL_ATTACK = (
    "                if attack_switch[atk]:\n"
    "                    adv_images_dict = sess.run(attack_tensor_dict[atk], feed_dict = "
    "{x:mnist.test.images,")
# The release's benign accuracy is one pass with its fixed training noise fed (input and
# hidden); tfdp's test accuracy is the noise-free network's. So that both sides can be compared
# on the same quantity, the copy also prints the noise-free network's accuracy (zero input and
# hidden noise: the release's own zero-scale test draws) at each evaluation. Evaluation only:
# nothing that trains changes.
_STOBATCH_BENIGN = ("            softmax_predictions = softmax_y_conv.eval(feed_dict={x: "
                    "mnist.test.images, noise: BenignLNoise, FM_h: perturbFM_h})\n")
_STOBATCH_NOISE_FREE = (
    "            print('step: %d\\t noise_free: %g' % (i, np.mean(np.argmax("
    "softmax_y_conv.eval(feed_dict={{x: mnist.test.images, noise: AdvLnoise_test, "
    "FM_h: perturbFM_h_test}}), axis=1) == np.argmax(mnist.test.labels, axis=1))))\n")
_add(ReleaseJob(
    name="stobatch.mnist",
    repo="haiphanNJIT/StoBatch",
    commit="08a6505b1fad609850de6c6bbaaa54c0200f0adb",
    folder="MNIST",
    script="StoBatch.py",
    settings={"epochs": "200", "attack_iters": "100", "eval_epochs": "10", "fgsm_eps": "5",
              "eval_attacks": "True"},
    overrides=(
        Override("StoBatch.py", "epochs = 200;", "epochs = {epochs};"),
        Override("StoBatch.py", "iterativeStep = 100", "iterativeStep = {attack_iters}"),
        Override("StoBatch.py",
                 "if i % int(10*step_for_epoch) == 0 and i > int(10*step_for_epoch):",
                 "if i % int({eval_epochs}*step_for_epoch) == 0 and i > 0:"),
        Override("StoBatch.py", "for fgsm_eps in [5, 10, 20, 30, 40, 50, 60]:",
                 "for fgsm_eps in [{fgsm_eps}]:"),
        Override("StoBatch.py", _STOBATCH_EVAL_ATTACK,
                 _STOBATCH_EVAL_ATTACK.replace("{", "{{").replace(
                     "attack_switch[atk]:", "attack_switch[atk] and {eval_attacks}:")),
        Override("StoBatch.py", _STOBATCH_BENIGN,
                 _STOBATCH_BENIGN.replace("{", "{{").replace("}", "}}")
                 + _STOBATCH_NOISE_FREE),
    ),
    data_dir="MNIST_data",
    make_dirs=("tmp/results",),
    curve_pattern=r"^step: (?P<step>[0-9.]+)\t epsilon: [0-9.]+\t benign: (?P<accuracy>[0-9.]+)",
    extra_metrics={"noise_free_accuracy":
                   r"^step: (?P<step>\d+)\t noise_free: (?P<accuracy>[0-9.eE+-]+)\s*$"},
))


def get(name: str) -> ReleaseJob:
    """The job called `name`.

    Raises:
      ValueError: naming the known jobs if there is none.
    """
    if name not in JOBS:
        raise ValueError(f"job must be one of {sorted(JOBS)}, got {name!r}")
    return JOBS[name]
