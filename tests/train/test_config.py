"""A run's configuration typed: the common options read and checked once, typed settings."""

import dataclasses

import pytest

from tfdp.train import base, config, dpsgd


def test_common_options_default_when_absent():
    common = config.CommonOptions.from_options({"dpsgd_l2_clip": 1.0})
    assert common == config.CommonOptions(None, False)
    assert config.CommonOptions.NAMES == tuple(f.name for f in dataclasses.fields(common))


@pytest.mark.parametrize("sigma", [0.0, -1.0, float("inf"), float("nan"), "x", True])
def test_a_bad_smoothing_sigma_is_refused_naming_the_flag(sigma):
    with pytest.raises(ValueError, match="--smoothing_sigma: expected a positive number"):
        config.CommonOptions.from_options({"smoothing_sigma": sigma})


def test_allow_unsound_certificates_must_be_a_bool():
    assert config.CommonOptions.from_options(
        {"allow_unsound_certificates": True}).allow_unsound_certificates is True
    with pytest.raises(ValueError, match="--allow_unsound_certificates: expected true or false"):
        config.CommonOptions.from_options({"allow_unsound_certificates": "yes"})


def test_train_config_reads_the_common_options_once_as_typed_values():
    cfg = base.TrainConfig(method="dpsgd", dataset="synthetic", model_dir="/tmp/x",
                           options={"smoothing_sigma": 1, "dpsgd_l2_clip": 1.0})
    assert cfg.common.smoothing_sigma == 1.0 and isinstance(cfg.common.smoothing_sigma, float)
    # The stored options are config.json's, unchanged.
    assert cfg.options == {"smoothing_sigma": 1, "dpsgd_l2_clip": 1.0}
    # A replaced config reads its own options.
    other = dataclasses.replace(cfg, options={})
    assert other.common.smoothing_sigma is None
    with pytest.raises(ValueError, match="--smoothing_sigma"):
        base.TrainConfig(method="dpsgd", dataset="synthetic", model_dir="/tmp/x",
                         options={"smoothing_sigma": -2.0})


def test_a_method_is_generic_in_its_settings_class():
    assert dpsgd.DPSGD.__orig_bases__ == (base.Method[dpsgd.DPSGDConfig],)
    cfg = base.TrainConfig(method="dpsgd", dataset="synthetic", model_dir="/tmp/x",
                           options=dpsgd.DPSGDConfig(l2_clip=2.0))
    method = dpsgd.DPSGD(cfg)
    assert isinstance(method.settings, dpsgd.DPSGDConfig) and method.settings.l2_clip == 2.0


def test_old_names_stay_importable_from_base():
    assert base.TrainConfig is config.TrainConfig
    assert base.CommonOptions is config.CommonOptions
