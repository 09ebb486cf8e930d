#!/bin/bash
TREE=$1; OUT=$2
cd $TREE
PYTHONPATH=$TREE TFDP_DATA_DIR=/work/testdata TF_CPP_MIN_LOG_LEVEL=2 /work/main/.venv/bin/python -m tfdp.apps.train --flagfile=flags/baselines/dpsgd_smoke.flags --seed=1 --model_dir=$OUT/dpsgd_smoke > $OUT/dpsgd_smoke.log 2>&1 || echo FAIL
