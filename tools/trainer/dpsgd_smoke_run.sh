#!/bin/bash
# usage: TFDP_DATA_DIR=DATA bash tools/trainer/dpsgd_smoke_run.sh TREE OUT   (PY: the interpreter)
set -euo pipefail
TREE=$1; OUT=$2; PY=${PY:-python}
cd "$TREE"
PYTHONPATH=$TREE TF_CPP_MIN_LOG_LEVEL=2 $PY -m tfdp.apps.train --flagfile=flags/baselines/dpsgd_smoke.flags --seed=1 --model_dir=$OUT/dpsgd_smoke > $OUT/dpsgd_smoke.log 2>&1 || echo FAIL
