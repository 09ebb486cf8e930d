#!/usr/bin/env bash
# Reduced-small HGM reproduction (MNIST, 10,000 training images, 2 epochs, CPU-sized network,
# 200 test images, 200 Monte-Carlo draws). Usage: tools/hgm/run_reduced_small.sh STREAM OUT
# with STREAM one of fig5_eps2, fig5_eps0.2, fig3; OUT a scratch folder for run directories.
set -euo pipefail
STREAM=$1; OUT=$2; PY=${PY:-python}
COMMON="--dataset=mnist --num_train=10000 --num_test=200 --value_range=0,1 --epochs=2 \
 --batch_size=128 --optimizer=adam --learning_rate=0.003 --delta=1e-5 --seed=1"
HGM="--hgm_model=small --hgm_construction_bound=0.2 --hgm_delta_r=1e-5 --hgm_pretrain_epochs=1 \
 --hgm_pretrain_examples=2000 --hgm_num_draws=200 --hgm_bound=hoeffding"
EVAL5="--attacks=fgsm,ifgsm,mim,madry --attack_sizes=0.1 --num_examples=200 --seed=0"
EVAL3="--attacks=fgsm,ifgsm,mim,madry --attack_sizes=0.05,0.1,0.2,0.3 --num_examples=100 --seed=0"
train() { $PY -m tfdp.apps.train --verbose=0 "$@"; }
evaluate() { $PY -m tfdp.apps.evaluate "$@"; }
case $STREAM in
  fig5_eps*)
    EPS=${STREAM#fig5_eps}
    for M in secure_sgd secure_sgd_agm; do
      D=$OUT/${M}_eps$EPS
      train --method=$M $COMMON $HGM --epsilon=$EPS --hgm_eps_r=4 \
        --hgm_sensitivity_mode=code_spectral --model_dir=$D
      evaluate --model_dir=$D --certify $EVAL5
    done
    D=$OUT/dpsgd_eps$EPS
    train --method=dpsgd $COMMON --epsilon=$EPS --dpsgd_model=cnn --model_dir=$D
    evaluate --model_dir=$D $EVAL5
    if [ "$EPS" = "2" ]; then
      D=$OUT/secure_sgd_sound_eps2
      train --method=secure_sgd $COMMON $HGM --epsilon=2 --hgm_eps_r=4 \
        --hgm_sensitivity_mode=layer_max --model_dir=$D
      evaluate --model_dir=$D --certify $EVAL5
    fi ;;
  fig3)
    D=$OUT/hgm_pixeldp_epsr4
    train --method=hgm_pixeldp $COMMON $HGM --hgm_eps_r=4 --hgm_sensitivity_mode=code_spectral \
      --model_dir=$D
    evaluate --model_dir=$D --certify $EVAL3
    D=$OUT/pixeldp_epsr1
    train --method=pixeldp $COMMON $HGM --hgm_eps_r=1 --hgm_sensitivity_mode=code_spectral \
      --model_dir=$D
    evaluate --model_dir=$D --certify $EVAL3 ;;
  *) echo "unknown stream $STREAM" >&2; exit 2 ;;
esac
