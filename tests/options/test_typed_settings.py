"""Issue 28: typed settings. A method's frozen dataclass of typed fields is the single
declaration: its flags, help and checks come from it, and the trainer reads `self.settings`."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pathlib
import typing
from typing import Optional

import pytest

from tfdp import options
from tfdp.train.base import TrainConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
METHOD_MODULES = {  # module: (settings class, its method classes)
    "tfdp.train.dpsgd": ("DPSGDConfig", ("DPSGD",)),
    "tfdp.train.nonprivate": ("NonPrivateConfig", ("NonPrivate",)),
    "tfdp.papers.adlm.method": ("AdLMConfig", ("AdLM", "ILM")),
    "tfdp.papers.hgm.method": ("SecureSGDConfig",
                               ("SecureSGD", "SecureSGDAGM", "HGMPixelDP", "PixelDP")),
    "tfdp.papers.stobatch.method": ("StoBatchConfig", ("StoBatch",)),
}
_KIND_OF_TYPE = {float: "float", int: "integer", bool: "bool", str: "string"}


@pytest.mark.parametrize("module", sorted(METHOD_MODULES))
def test_fields_are_typed_and_the_flags_are_derived_from_them(module):
    mod = importlib.import_module(module)
    cls_name, methods = METHOD_MODULES[module]
    cls = getattr(mod, cls_name)
    assert mod.OPTIONS is cls.OPTIONS  # the flags come from the dataclass, nowhere else
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    assert [cls.PREFIX + f.name for f in fields] == list(cls.OPTIONS.names)
    for f in fields:
        hint = hints[f.name]
        assert hint is not typing.Any, f"{cls_name}.{f.name} is untyped"
        option = cls.OPTIONS[cls.PREFIX + f.name]
        base = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        want = _KIND_OF_TYPE.get(base[0], "list")
        if option.kind == "enum":
            assert want == "string" and option.enum_values
        else:
            assert option.kind == want, (f.name, option.kind, hint)
        assert option.help and option.default == f.default
    for name in methods:
        assert getattr(mod, name).settings_class is cls


@pytest.mark.parametrize("module", sorted(METHOD_MODULES))
def test_no_trainer_reads_its_own_options_mapping(module):
    """Trainers use self.settings.<field>: no `config.options` lookup of their own prefix."""
    path = ROOT / (module.replace(".", "/") + ".py")
    prefix = getattr(importlib.import_module(module), METHOD_MODULES[module][0]).PREFIX
    reads = []
    for node in ast.walk(ast.parse(path.read_text())):
        # a flag looked up by name: mapping.get("<prefix>..."), OPTIONS.get(opts, "..."),
        # OPTIONS.default("..."), a helper _opt(opts, "...") / self._o("..."), or opts["..."]
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in ("get", "default", "setting", "_opt", "_o"):
                continue
            keys = node.args
        elif isinstance(node, ast.Subscript):
            keys = [node.slice]
        else:
            continue
        for key in keys:
            if isinstance(key, ast.Constant) and str(key.value).startswith(prefix):
                reads.append(f"{path.name}:{node.lineno}: {key.value}")
    assert not reads, reads


def test_a_bad_value_names_its_flag_when_the_method_is_made(tmp_path):
    from tfdp.papers.hgm import method as hgm  # pylint: disable=import-outside-toplevel

    def make(**opts):
        return hgm.SecureSGD(TrainConfig("secure_sgd", "synthetic", str(tmp_path),
                                         epsilon=2.0, delta=1e-5, options=opts))

    assert make().settings.delta_r == 1e-5
    for opts, text in (({"hgm_delta_r": 1.5}, "--hgm_delta_r: expected a number in (0, 1)"),
                       ({"hgm_pretrain_epochs": 0}, "--hgm_pretrain_epochs: expected an "
                                                    "integer >= 1"),
                       ({"hgm_model": "vgg"}, "--hgm_model: expected one of"),
                       ({"hgm_l2_clip": "big"}, "--hgm_l2_clip: expected a number"),
                       ({"hgm_r_file": "r.npy"}, "--hgm_r_file: only used with"),
                       ({"hgm_r_source": "file"}, "--hgm_r_file: required with")):
        with pytest.raises(ValueError) as err:
            make(**opts)
        assert text in str(err.value), (opts, str(err.value))
    # A method-dependent default: eps_r is 4 for HGM, 1 for the classical GM of PixelDP.
    assert make().eps_r == 4.0
    assert hgm.PixelDP(TrainConfig("pixeldp", "synthetic", str(tmp_path))).eps_r == 1.0


def test_values_are_converted_to_the_declared_types():
    from tfdp.papers.adlm import method as adlm  # pylint: disable=import-outside-toplevel
    cfg = adlm.AdLMConfig.from_options({"adlm_eps_split": ["0.2", "0.3", "0.5"],
                                        "adlm_aux_epochs": 3, "adlm_lrp_mu": 0,
                                        "adlm_delta_h0": 50})
    assert cfg.eps_split == (0.2, 0.3, 0.5) and isinstance(cfg.lrp_mu, float)
    assert cfg.delta_h0 == "50"  # a number for a preset-or-number setting
    with pytest.raises(ValueError, match="--adlm_eps_split: the fractions must sum to 1"):
        adlm.AdLMConfig(eps_split=(0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="--adlm_aux_epochs: expected an integer"):
        adlm.AdLMConfig(aux_epochs=2.5)
    with pytest.raises(ValueError, match="--adlm_perturb_bias: expected true or false"):
        adlm.AdLMConfig(perturb_bias="yes")


def test_declare_rejects_undeclared_or_unsupported_fields():
    with pytest.raises(TypeError, match="declare it with tfdp.options.field"):
        @options.declare("z_")
        class Bad:  # pylint: disable=unused-variable
            plain: int = 3
    with pytest.raises(TypeError, match="choices need a str field"):
        @options.declare("z_")
        class Bad2:  # pylint: disable=unused-variable
            n: int = options.field(1, "n", choices=("1", "2"))
    with pytest.raises(TypeError, match="unsupported option annotation"):
        @options.declare("z_")
        class Bad3:  # pylint: disable=unused-variable
            d: dict = options.field(None, "d")

    @options.declare("z_")
    class Good:
        a: Optional[float] = options.field(None, "a", check=options.positive)

    assert Good().a is None and Good(a=2).a == 2.0 and Good.OPTIONS["z_a"].kind == "float"
