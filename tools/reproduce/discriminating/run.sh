#!/usr/bin/env bash
# Issue 29 discriminating runs: StoBatch MNIST at eps = 0.2, 400 steps (10x the reduced rows'
# 40), on the paper's data path and the authors' code-release path. About 100 minutes of
# training each on 2 shared CPU cores, then a Monte-Carlo evaluation of 500 test images under
# the four attacks at mu_a = 0.2. Run from the repository root with real MNIST in
# TFDP_DATA_DIR:  bash tools/reproduce/discriminating/run.sh
set -euo pipefail
for path in paper authors; do
  ff=flags/stobatch/mnist_reduced.flags
  [ "$path" = authors ] && ff=flags/stobatch/mnist_reduced_authors_path.flags
  run=runs/discriminating/sb_eps0.2_$path
  tfdp-train --flagfile=$ff --method=stobatch --dataset=mnist --epsilon=0.2 --seed=1 \
    --epochs=100 --noise_kernel=auto --model_dir=$run
  tfdp-evaluate --attacks=fgsm,ifgsm,mim,madry --attack_sizes=0.2 --nb_iter=10 --seed=1 \
    --attack_preset=strong --certify --num_examples=500 --model_dir=$run
done
