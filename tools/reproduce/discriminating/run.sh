#!/usr/bin/env bash
# Issue 29 discriminating runs: StoBatch MNIST at 400 steps (10x the reduced rows' 40), on the
# paper's data path and the authors' code-release path. About 100 minutes of training each on
# 2 shared CPU cores, then a Monte-Carlo evaluation of 500 test images under the four attacks
# at mu_a = 0.2. Run from the repository root with real MNIST in TFDP_DATA_DIR:
#   SEED=<N> bash tools/reproduce/discriminating/run.sh [EPSILON [PATH ...]]
# EPSILON defaults to 0.2; PATH is paper and/or authors (default both, one after the other);
# SEED (default 1) is the training seed (the evaluation's own seed stays 1). Run again after an
# interruption, it resumes the training from its last checkpoint and skips what finished. The
# runs go to
# ${RUNS:-runs/discriminating}/sb_eps<EPSILON>_<PATH>_seed<SEED>, and their record files
# (config, flags, ledger, metrics, evaluation, log) to
# results/reproduce/discriminating/sb_eps<EPSILON>_<PATH>_seed<SEED>/; the report averages
# the seeds found.
set -euo pipefail
seed=${SEED:-1}
[[ $seed =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: SEED must be a positive integer, got '$seed'" >&2; exit 2; }
eps=${1:-0.2}
shift || true
paths=("$@")
[ ${#paths[@]} -eq 0 ] && paths=(paper authors)
for path in "${paths[@]}"; do
  case $path in
    paper) ff=flags/stobatch/mnist_reduced.flags ;;
    authors) ff=flags/stobatch/mnist_reduced_authors_path.flags ;;
    *) echo "run.sh: PATH must be paper or authors, got '$path'" >&2; exit 2 ;;
  esac
  name=sb_eps${eps}_${path}_seed$seed
  run=${RUNS:-runs/discriminating}/$name out=results/reproduce/discriminating/$name
  mkdir -p "$(dirname "$run")"
  if [ -e "$run/model.keras" ]; then
    echo "run.sh: $run has finished training; evaluating it"
  elif [ -e "$run/checkpoints" ]; then
    # An interrupted run: resumed from its last checkpoint (the same lots and noise; on the
    # same platform the replayed steps are charged once, docs/ledger.md).
    tfdp-train --resume --model_dir=$run 2>&1 | tee -a "$run.log"
  else
    tfdp-train --flagfile=$ff --method=stobatch --dataset=mnist --epsilon=$eps --seed=$seed \
      --epochs=100 --noise_kernel=auto --model_dir=$run 2>&1 | tee "$run.log"
  fi
  [ -e "$run/evaluation.json" ] || tfdp-evaluate --attacks=fgsm,ifgsm,mim,madry \
    --attack_sizes=0.2 --nb_iter=10 --seed=1 --attack_preset=strong --certify \
    --num_examples=500 --model_dir=$run
  mkdir -p "$out"
  cp "$run"/{config.json,flags.txt,ledger.json,metrics.json,evaluation.json} "$out"/
  cp "$run.log" "$out/train.log"
done
