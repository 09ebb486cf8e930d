#!/usr/bin/env bash
# Issue 29 discriminating runs: is Secure-SGD at chance under the sound l_inf sensitivity
# (--hgm_sensitivity_mode=layer_max, the reduced flagfiles' setting) a matter of scale? Each
# reduced flagfile is trained with more epochs: MNIST at eps = 2 for 25 epochs (5x the
# reduced rows' 5), CIFAR-10 at eps = 10 for 30 epochs (10x their 3); and MNIST at eps = 2
# for the reduced 5 epochs with the sound l2 bound instead (l2_fourier, uniform r). About 17,
# 3 and 5 minutes on 2 shared CPU cores. Run from the repository root with real MNIST and
# CIFAR-10 in TFDP_DATA_DIR:
#   bash tools/reproduce/discriminating/hgm_sound_10x.sh [SEED]
# SEED (default 1, the flagfiles' own) is passed as --seed. Each run directory's record files
# (config, flags, ledger, metrics, log) are copied to
# results/reproduce/discriminating/<name>_seed<SEED>/; the report averages the seeds found.
set -euo pipefail
seed=${1:-1}
[[ $seed =~ ^[1-9][0-9]*$ ]] || { echo "hgm_sound_10x.sh: SEED must be a positive integer, got '$seed'" >&2; exit 2; }
mkdir -p runs/discriminating
run_one() {  # name flagfile args...
  local name=${1}_seed$seed flagfile=$2
  shift 2
  local run=runs/discriminating/$name out=results/reproduce/discriminating/$name
  tfdp-train --flagfile="$flagfile" "$@" --seed="$seed" --model_dir="$run" > "$run.log" 2>&1
  mkdir -p "$out"
  cp "$run"/{config.json,flags.txt,ledger.json,metrics.json} "$out"/
  cp "$run.log" "$out/train.log"
}
run_one hgm_mnist_secure_sgd_eps2_25ep flags/hgm/mnist_reduced.flags --epsilon=2 --epochs=25
run_one hgm_cifar10_secure_sgd_eps10_30ep flags/hgm/cifar10_reduced.flags --epsilon=10 \
  --epochs=30
run_one hgm_mnist_secure_sgd_eps2_l2_5ep flags/hgm/mnist_reduced.flags --epsilon=2 \
  --hgm_sensitivity_mode=l2_fourier --hgm_r_source=uniform
