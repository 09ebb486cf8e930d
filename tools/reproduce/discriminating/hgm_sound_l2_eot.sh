#!/usr/bin/env bash
# Issue 29 discriminating run: how much of the sound-l2 Secure-SGD's lead over DP-SGD under
# attack (hgm.mnist.secure_sgd_minus_dpsgd.sound_l2) comes from the paper's protocol, which
# crafts the attacks on the noise-free network and scores the noisy Monte-Carlo prediction?
# Attacks the eps = 2 model of that row white-box instead (EOT: gradients averaged over 8
# noise draws), on the same 500 test images, same attacks and size. About a minute on 2 CPU
# cores after the row's training. Run from the repository root with real MNIST in
# TFDP_DATA_DIR, after
#   tfdp-reproduce --scale=reduced --only=hgm.mnist.secure_sgd_minus_dpsgd.sound_l2
# (its run directory is under runs/reproduce/reduced/ unless WORK says otherwise):
#   bash tools/reproduce/discriminating/hgm_sound_l2_eot.sh [SEED]
# SEED (default 1): the training seed of the row's model to attack (its run directory
# train.hgm.mnist_secure_sgd.eps2.sound_l2@seed<SEED>, made by the row with --seeds); the
# evaluation's own seed stays 1, as in the row's evaluations. The model is copied first, so
# the row's own evaluation.json is left alone; evaluation.json and the log are copied to
# results/reproduce/discriminating/hgm_mnist_sound_l2_eps2_eot8_seed<SEED>/.
set -euo pipefail
seed=${1:-1}
[[ $seed =~ ^[1-9][0-9]*$ ]] || { echo "hgm_sound_l2_eot.sh: SEED must be a positive integer, got '$seed'" >&2; exit 2; }
src=${WORK:-runs/reproduce}/reduced/train.hgm.mnist_secure_sgd.eps2.sound_l2@seed$seed
run=runs/discriminating/hgm_mnist_sound_l2_eps2_eot8_seed$seed
out=results/reproduce/discriminating/hgm_mnist_sound_l2_eps2_eot8_seed$seed
[ -d "$src" ] || { echo "hgm_sound_l2_eot.sh: $src is missing: run the row first" >&2; exit 2; }
mkdir -p runs/discriminating "$out"
rm -rf "$run" && cp -r "$src" "$run"
tfdp-evaluate --attacks=fgsm,ifgsm,mim,madry --attack_sizes=0.1 --nb_iter=10 --seed=1 \
  --certify --eot_draws=8 --draws_per_step=32 --num_examples=500 --model_dir="$run" \
  > "$run.log" 2>&1
cp "$run/evaluation.json" "$out/"
cp "$run.log" "$out/eval.log"
