#!/usr/bin/env bash
# Issue 29 discriminating runs: is Secure-SGD at chance under the sound l_inf sensitivity
# (--hgm_sensitivity_mode=layer_max, the reduced flagfiles' setting) a matter of scale? Each
# reduced flagfile is trained with more epochs: MNIST at eps = 2 for 25 epochs (5x the
# reduced rows' 5), CIFAR-10 at eps = 10 for 30 epochs (10x their 3). About 10 and 3 minutes
# on 2 CPU cores. Run from the repository root with real MNIST and CIFAR-10 in TFDP_DATA_DIR:
#   bash tools/reproduce/discriminating/hgm_sound_10x.sh
# Each run directory's record files (config, flags, ledger, metrics, log) are copied to
# results/reproduce/discriminating/hgm_<dataset>_secure_sgd_eps<EPS>_<EPOCHS>ep/.
set -euo pipefail
mkdir -p runs/discriminating
for spec in mnist:2:25 cifar10:10:30; do
  IFS=: read -r dataset eps epochs <<< "$spec"
  name=hgm_${dataset}_secure_sgd_eps${eps}_${epochs}ep
  run=runs/discriminating/$name
  tfdp-train --flagfile=flags/hgm/${dataset}_reduced.flags --epsilon=$eps --epochs=$epochs \
    --model_dir=$run > "$run.log" 2>&1
  out=results/reproduce/discriminating/$name
  mkdir -p "$out"
  cp "$run"/{config.json,flags.txt,ledger.json,metrics.json} "$out"/
  cp "$run.log" "$out/train.log"
done
