"""tfdp.train.strategy: --strategy names and the chief of a TF_CONFIG cluster."""

import json

import pytest
import tensorflow as tf

from tfdp.train import strategy


@pytest.mark.parametrize("conf, chief", [
    (None, True),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}, True),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}, False),
    ({"cluster": {"chief": ["c:0"], "worker": ["a:1"]}, "task": {"type": "worker",
                                                                 "index": 0}}, False),
    ({"cluster": {"chief": ["c:0"], "worker": ["a:1"]}, "task": {"type": "chief",
                                                                 "index": 0}}, True),
])
def test_tf_config_is_chief(monkeypatch, conf, chief):
    if conf is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", json.dumps(conf))
    assert strategy.tf_config_is_chief() is chief


def test_default_and_mirrored_strategies():
    assert strategy.make_strategy("default") is tf.distribute.get_strategy()
    assert strategy.is_chief(tf.distribute.get_strategy())
    mirrored = strategy.make_strategy("mirrored")
    assert mirrored.num_replicas_in_sync == 2  # tests/conftest.py: two logical CPUs
    assert strategy.is_chief(mirrored)


def test_unknown_strategy_names_the_flag():
    with pytest.raises(ValueError, match="strategy: unknown strategy 'ring'"):
        strategy.make_strategy("ring")
