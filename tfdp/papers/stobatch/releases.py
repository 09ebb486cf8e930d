"""StoBatch's code release beside tfdp: its release job and the report's comparisons.

Declared in the paper's PAPER (kinds "release_job" and "release_comparisons"); the harness
and the report (tfdp.reproduce.releases) find them through tfdp.registry.
"""

from tfdp.reproduce.releases.attribution import Comparison, Toggle
from tfdp.reproduce.releases.jobs import Override, ReleaseJob

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
MNIST_JOB = ReleaseJob(
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
)


# The comparisons in the report's section "The authors' releases beside tfdp", in this order
# among the paper's (tfdp.reproduce.releases.attribution.comparisons orders the papers').
COMPARISONS = (
    Comparison(
        key="stobatch_mnist_e2", title="StoBatch, MNIST", job="stobatch.mnist",
        release_glob="stobatch_mnist_release_e2_seed*.json",
        tfdp_glob="stobatch_mnist_tfdp_relall_s40_seed*.json",
        budget="40 steps of |L| = 2,499 (release 2 epochs, tfdp 4), 10-iteration training attacks",
        release_steps="40 (its last evaluation; it trains one step more)", identical=False,
        settings_note="the release's settings and data path "
                      "(flags/releases/stobatch_mnist_release.flags) with its Madry step "
                      "(--stobatch_madry_eps_iter=0.005), its never-shuffled reader "
                      "(--stobatch_pairing=release_reader), its output noise term "
                      "(--stobatch_noise_term=linear_broadcast), its two Adams "
                      "(--stobatch_adam_epsilon, --stobatch_ae_adam_epsilon) and its network, "
                      "read from its graph after the first runs: its batch norms' offset and "
                      "gain never trained (--stobatch_bn_affine=frozen), its training attacks "
                      "run on its unnormalised second copy of the network "
                      "(--stobatch_attack_net=release_unnormalised) and its classifier path "
                      "with the latent noise before conv1's ReLU and batch norm and no clip "
                      "(--stobatch_classifier_h=release_pre_relu, whose certificates are only "
                      "claimed: --allow_unsound_certificates). Not identical: tfdp's reader "
                      "goes over the first 50,000 training images, the release's over the last "
                      "55,000; the release's dense and output layers have trained biases, "
                      "tfdp's none; its attacks clip their rows to [-1, 1] "
                      "(--stobatch_attack_clip, a toggle of the longer budget) "
                      "(docs/reproduce.md)",
        release_metric="noise_free_accuracy",
        release_metric_text="both sides: the noise-free network's test accuracy (the release's "
                            "own benign number feeds its fixed training noise; the harness "
                            "makes the copy print the noise-free one too, an evaluation-only "
                            "line, and the release's own number is in its result file)",
        paper="stobatch", rows=("stobatch.mnist.stobatch.eps0.2",
                                "stobatch.mnist.stobatch.eps0.2.authors_path"),
        toggles=(
            Toggle("closest", "stobatch_mnist_tfdp_closest_s40_seed*.json",
                   "without the three network options"),
            Toggle("base", "stobatch_mnist_tfdp_s40_seed*.json",
                   "without those and without the five (Madry step mu / T, fixed pairs, the "
                   "paper's linear term once, Keras' Adam epsilons)"),
            Toggle("adam", "stobatch_mnist_tfdp_adam_s40_seed*.json",
                   "with only the two Adams"),
            Toggle("madry_reader", "stobatch_mnist_tfdp_madry_reader_s40_seed*.json",
                   "with only the Madry step and the reader")),
        published=82.7, published_text="StoBatch, eps 0.2: accuracy under attack "
                                       "(the paper's attack setting), not clean accuracy"),
    Comparison(
        key="stobatch_mnist_e6", title="StoBatch, MNIST, longer", job="stobatch.mnist",
        release_glob="stobatch_mnist_release_e6_seed*.json",
        tfdp_glob="stobatch_mnist_tfdp_relall_s120_seed*.json",
        budget="120 steps of |L| = 2,499 (release 6 epochs, tfdp 12; the paper trains "
               "200 epochs, 4,000 steps), 10-iteration training attacks",
        release_steps="120 (its last evaluation)", identical=False,
        settings_note="those of the 40-step comparison above, run three times as long "
                      "(`--set=epochs=6` and `--epochs=12`)",
        release_metric="noise_free_accuracy",
        release_metric_text="both sides: the noise-free network's test accuracy, as above",
        published=82.7, published_text="StoBatch, eps 0.2: accuracy under attack "
                                       "(the paper's attack setting), not clean accuracy",
        paper="stobatch", rows=("stobatch.mnist.stobatch.eps0.2",),
        # Without the release's network tfdp fell behind the release as training went on;
        # the toggles show which of its options closes that (docs/reproduce.md).
        toggles=(
            Toggle("closest", "stobatch_mnist_tfdp_closest_s120_seed*.json",
                   "without the three network options"),
            Toggle("prerelu", "stobatch_mnist_tfdp_prerelu_s120_seed*.json",
                   "with the classifier path as its only network option"),
            Toggle("relnet", "stobatch_mnist_tfdp_relnet_s120_seed*.json",
                   "with the frozen batch-norm affine and the attack network but not the "
                   "classifier path"),
            Toggle("clip", "stobatch_mnist_tfdp_clip_s120_seed*.json",
                   "without the network options, with the attacks' range clip "
                   "(--stobatch_attack_clip)")),
        scale_of="stobatch_mnist_e2"),
)
