"""Typed option declarations: library modules define no absl flag; the apps' flags match them."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
from absl import flags

from tfdp import options
from tfdp.apps import option_flags

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every library module that declares options, with its config class (None: bench modules,
# whose `run(**overrides)` takes the options without the prefix).
METHOD_MODULES = {
    "tfdp.papers.adlm.method": "AdLMConfig",
    "tfdp.train.dpsgd": "DPSGDConfig",
    "tfdp.papers.hgm.method": "SecureSGDConfig",
    "tfdp.papers.stobatch.method": "StoBatchConfig",
    "tfdp.train.nonprivate": "NonPrivateConfig",
}
BENCH_MODULES = ("tfdp.bench.layers", "tfdp.bench.dpsgd", "tfdp.papers.stobatch.bench",
                 "tfdp.bench.export", "tfdp.bench.certify", "tfdp.papers.gpm.bench")

def _subprocess_json(code: str, *args: str) -> object:
    env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=_ROOT, env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_library_modules_defines_no_flag():
    # One fresh process (absl flags are process-global and only ever added): the reference
    # set after importing what the library modules import themselves (TF, Keras, absl) and
    # nothing of tfdp, then the set after importing the library modules (it must not grow),
    # then after importing the train app.
    modules = list(METHOD_MODULES) + list(BENCH_MODULES)
    code = ("from absl import flags; import json; names = []; "
            "import tensorflow, keras, numpy; names.append(sorted(flags.FLAGS)); "
            f"import {', '.join(modules)}; names.append(sorted(flags.FLAGS)); "
            "import tfdp.apps.train as t; t.FLAGS; names.append(sorted(flags.FLAGS)); "
            "print(json.dumps(names))")
    reference, with_tfdp, with_app = _subprocess_json(code)
    assert set(with_tfdp) == set(reference)
    # And the check can fail: the apps do define the options' flags.
    assert "dpsgd_l2_clip" in set(with_app) - set(reference)


@pytest.mark.parametrize("module", list(METHOD_MODULES) + list(BENCH_MODULES))
def test_flags_are_generated_from_the_declarations(module):
    fv = flags.FlagValues()
    option_set = option_flags.define_module_flags(module, fv)
    assert len(option_set) > 0
    assert set(fv) == set(option_set.names)
    for opt in option_set:
        flag = fv[opt.name]
        assert flag.default == option_set.default(opt.name), opt.name
        if opt.kind == "enum":  # absl puts the choices in front: "<a|b>: help"
            assert list(flag.parser.enum_values) == list(opt.enum_values), opt.name
            assert flag.help == f"<{'|'.join(opt.enum_values)}>: {opt.help}", opt.name
        else:
            assert flag.help == opt.help, opt.name
    assert {f.name for f in fv.get_flags_for_module(module)} == set(option_set.names)


@pytest.mark.parametrize("module,cls", sorted(METHOD_MODULES.items()))
def test_flag_defaults_equal_config_defaults(module, cls):
    import importlib  # pylint: disable=import-outside-toplevel
    mod = importlib.import_module(module)
    fv = flags.FlagValues()
    option_flags.define_module_flags(module, fv)
    fv(["prog"])
    config = getattr(mod, cls)()
    assert config.as_options() == option_flags.option_values(mod.OPTIONS, fv)
    assert getattr(mod, cls).from_options(option_flags.option_values(mod.OPTIONS, fv)) == config


def test_config_class_round_trip_and_validation():
    from tfdp.train import dpsgd  # pylint: disable=import-outside-toplevel
    cfg = dpsgd.DPSGDConfig(l2_clip=0.5, model="mlp")
    opts = cfg.as_options()
    assert opts["dpsgd_l2_clip"] == 0.5 and opts["dpsgd_model"] == "mlp"
    assert opts["dpsgd_accountant"] == "pld"  # the declared default (issue 40: PLD)
    assert dpsgd.DPSGDConfig.from_options(opts) == cfg
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.l2_clip = 2.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="model"):
        dpsgd.DPSGDConfig(model="resnet")
    with pytest.raises(TypeError):
        dpsgd.DPSGDConfig(dpsgd_l2_clip=0.5)  # fields have no prefix


def test_option_set_rejects_bad_declarations():
    opts = options.OptionSet("x_")
    opts.integer("x_a", 1, "a")
    with pytest.raises(ValueError, match="twice"):
        opts.integer("x_a", 2, "again")
    with pytest.raises(ValueError, match="must start with"):
        opts.float("y_b", 1.0, "b")
    with pytest.raises(ValueError, match="default"):
        opts.enum("x_c", "z", ["p", "q"], "c")
    opts.list("x_d", ["u", "v"], "d")
    assert opts.defaults() == {"x_a": 1, "x_d": ["u", "v"]}
    assert opts.get({}, "x_a") == 1 and opts.get({"x_a": 5}, "x_a") == 5
    assert opts.setting({}, "a") == 1 and opts.setting({"a": 3}, "a") == 3
    with pytest.raises(KeyError):
        opts.default("x_missing")


def test_bench_run_overrides_take_declared_defaults():
    from tfdp.bench import certify as certify_bench  # pylint: disable=import-outside-toplevel
    assert certify_bench.OPTIONS.setting({}, "num_draws") == 500
    assert certify_bench.OPTIONS.setting({"num_draws": 7}, "num_draws") == 7


_PYTHON_ONLY_DPSGD = """
import json, sys
from absl import flags
from tfdp import data
from tfdp.train import dpsgd, loop
from tfdp.train.base import TrainConfig

shape = (6, 6, 1)
x, y = data.load("synthetic", "train", shape=shape, num_classes=3, num_examples=64, seed=0)
xt, yt = data.load("synthetic", "test", shape=shape, num_classes=3, num_examples=32, seed=0)
config = TrainConfig(method="dpsgd", dataset="synthetic", model_dir=sys.argv[1], epochs=1,
                     batch_size=16, learning_rate=0.05, seed=3, epsilon=None, delta=1e-5,
                     options=dpsgd.DPSGDConfig(l2_clip=0.5, noise_multiplier=1.1, model="mlp"))
result = loop.train(dpsgd.DPSGD(config), loop.Data(x, y, xt, yt, shape, 3), verbose=0)
with open(sys.argv[1] + "/config.json") as f:
    stored = json.load(f)
print(json.dumps({"tfdp_flags": sorted(n for n in flags.FLAGS if n in dpsgd.OPTIONS),
                  "steps": result.steps, "accuracy": result.metrics["test_accuracy"],
                  "options": stored["options"]}))
"""


def test_dpsgd_runs_from_a_python_config_without_flags(tmp_path):
    out = _subprocess_json(_PYTHON_ONLY_DPSGD, str(tmp_path / "run"))
    assert out["tfdp_flags"] == []
    assert out["steps"] >= 1 and 0.0 <= out["accuracy"] <= 1.0
    assert out["options"]["dpsgd_l2_clip"] == 0.5
    assert out["options"]["dpsgd_noise_multiplier"] == 1.1
    assert out["options"]["dpsgd_model"] == "mlp"
    assert out["options"]["dpsgd_accountant"] == "pld"


def test_bench_app_passes_its_flags_to_run(tmp_path):
    # tfdp-bench defines the named benchmark's flags from its OPTIONS and hands the parsed
    # values to run(**overrides); a value differing from every default shows they arrive.
    out_file = tmp_path / "gpm.json"
    env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, "-m", "tfdp.apps.bench", "gpm", "--gpm_bench_d=256",
         "--gpm_bench_samples=2", "--gpm_bench_repeats=1", f"--output={out_file}"],
        cwd=_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out_file.read_text())
    assert (result["d"], result["samples_per_call"], result["repeats"]) == (256, 2, 1)
    bad = subprocess.run(
        [sys.executable, "-m", "tfdp.apps.bench", "gpm", "--gpm_bench_backend=bogus"],
        cwd=_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert bad.returncode != 0 and "gpm_bench_backend" in bad.stderr


def test_flag_options_of_a_plain_dataclass():
    import dataclasses as _dc
    from typing import Optional as _Opt, Sequence as _Seq

    @_dc.dataclass
    class Plain:
        names: _Seq[str] = options.flag(("a",), "names")
        size: _Opt[float] = options.flag(None, "size", name="the_size")
        mode: str = options.flag("x", "mode", choices=("x", "y"))
        internal: int = 3

    got = options.flag_options(Plain)
    assert [(f, o.name, o.kind, o.default, o.enum_values) for f, o in got] == [
        ("names", "names", "list", ("a",), None), ("size", "the_size", "float", None, None),
        ("mode", "mode", "enum", "x", ("x", "y"))]
