#!/usr/bin/env bash
# Issue 29 discriminating run: AdLM against ILM on MNIST at eps = 0.25 with the paper-scale
# flagfile (flags/adlm/mnist_full.flags: batch 1,800, Adam 3e-4, the code release's modes) cut
# from 2,400 to 100 epochs, one seed each. About an hour of training per method on 2 CPU
# cores when run alone. Run from the repository root with real MNIST in TFDP_DATA_DIR:
#   bash tools/reproduce/discriminating/adlm_vs_ilm_100_epochs.sh [SEED]
# Run again after an interruption, it resumes each unfinished training from its last checkpoint
# (written every 5 epochs here, instead of the flagfile's 50, so that an interrupted run loses
# at most 5 epochs; how often a run checkpoints does not change what it computes).
# Each run directory's record files (config, flags, ledger, metrics, log) are copied to
# results/reproduce/discriminating/<method>_eps0.25_100ep_seed<SEED>/.
set -euo pipefail
seed=${1:-1}
mkdir -p runs/discriminating
for method in adlm ilm; do
  run=runs/discriminating/${method}_eps0.25_100ep_seed$seed
  if [ -e "$run/model.keras" ]; then
    continue
  elif [ -e "$run/checkpoints" ]; then
    # Interrupted: resumed from its last checkpoint (same lots and noise, docs/ledger.md).
    tfdp-train --resume --model_dir=$run --checkpoint_every=5 >> "$run.log" 2>&1 &
  else
    tfdp-train --flagfile=flags/adlm/mnist_full.flags --method=$method --dataset=mnist \
      --epsilon=0.25 --epochs=100 --seed=$seed --noise_kernel=auto --checkpoint_every=5 \
      --model_dir=$run \
      > "$run.log" 2>&1 &
  fi
done
wait
for method in adlm ilm; do
  run=runs/discriminating/${method}_eps0.25_100ep_seed$seed
  out=results/reproduce/discriminating/${method}_eps0.25_100ep_seed$seed
  mkdir -p "$out"
  cp "$run"/{config.json,flags.txt,ledger.json,metrics.json} "$out"/
  cp "$run.log" "$out/train.log"
done
