#!/bin/bash
# usage: TFDP_DATA_DIR=DATA bash tools/trainer/identity_runs.sh TREE OUTROOT   (PY: the interpreter)
TREE=$1; OUT=$2
PY=${PY:-python}
cd $TREE
export PYTHONPATH=$TREE TF_CPP_MIN_LOG_LEVEL=2
run() { name=$1; shift; $PY -m tfdp.apps.train --model_dir=$OUT/$name --verbose=0 "$@" > $OUT/$name.log 2>&1 || echo "FAIL $name"; }
run nonprivate --method=nonprivate --dataset=sample --num_train=512 --num_test=200 --epochs=2 --batch_size=32 --seed=3
run dpsgd --flagfile=flags/baselines/dpsgd_smoke.flags --num_train=1000 --num_test=200 --epochs=1 --seed=2
run dpsgd_mirrored --flagfile=flags/baselines/dpsgd_smoke.flags --num_train=512 --num_test=100 --epochs=1 --seed=2 --strategy=mirrored --cpu_replicas=2
run adlm_ref --flagfile=flags/adlm/sample.flags --num_train=1000 --num_test=200 --epochs=1 --adlm_aux_epochs=1
run adlm_default --method=adlm --dataset=sample --num_train=500 --num_test=100 --epochs=1 --seed=2
run secure_sgd --flagfile=flags/hgm/sample.flags --num_train=600 --num_test=100 --epochs=1 --hgm_pretrain_examples=200
run pixeldp --method=pixeldp --dataset=sample --num_train=500 --num_test=100 --epochs=1 --seed=1 --value_range=0,1
run stobatch --flagfile=flags/stobatch/mnist_smoke.flags --dataset=sample --num_train=400 --num_test=50 --epochs=1 --batch_size=50 --stobatch_attack_iters=1
echo done
