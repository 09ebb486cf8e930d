"""EvalOptions is the one declaration of tfdp-evaluate's flags (names, defaults, help, choices)."""

import dataclasses
import json
import subprocess
import sys

from absl import flags

from tfdp import certify, eval_options, evaluate, kernels, options
from tfdp.apps import option_flags


def test_the_light_choices_are_the_libraries():
    assert eval_options.BOUNDS == tuple(certify.BOUNDS)
    assert eval_options.NOISE_KERNELS == ("auto",) + tuple(kernels.NOISE_KERNELS)
    assert eval_options.ATTACK_NORM_NAMES == tuple(evaluate.ATTACK_NORMS)


# The app's flags, read in a fresh process (its absl flags would clash with other apps').
_APP_FLAGS = """
import json
from tfdp.apps import evaluate as app
print(json.dumps({n: [app.FLAGS[n].default, app.FLAGS[n].help] for n in app.OWN_FLAGS}))
"""


def test_every_flag_field_is_an_app_flag_with_the_field_default():
    out = subprocess.run([sys.executable, "-c", _APP_FLAGS], capture_output=True, text=True,
                         check=True).stdout
    app_flags = json.loads(out.strip().splitlines()[-1])
    declared = options.flag_options(eval_options.EvalOptions)
    defaults = {f.name: f.default for f in dataclasses.fields(eval_options.EvalOptions)}
    assert [f for f, _ in declared][:3] == ["attacks", "attack_sizes", "size_range"]
    for field, option in declared:
        default, help_text = app_flags[option.name]
        want = defaults[field]
        assert default == (list(want) if isinstance(want, tuple) else want), field
        assert help_text.endswith(option.help), field
    # The app's own flags besides the options: the run or export to evaluate, the preset.
    assert set(app_flags) - {o.name for _, o in declared} == {
        "model_dir", "saved_model", "attack_preset", "verbose"}
    by_name = dict((o.name, (f, o)) for f, o in declared)
    assert by_name["attack_size_range"][0] == "size_range"
    assert by_name["bound"][1].enum_values == eval_options.BOUNDS
    # Fields set by presets or the library, not flags.
    assert not {"eps_iter_scale", "restarts", "noise_kernel_fallback"} & set(by_name)


def test_options_from_parsed_flags_equal_the_dataclass():
    fv = flags.FlagValues()
    declared = options.flag_options(eval_options.EvalOptions)
    option_flags.define_flags([o for _, o in declared], "test", fv)
    fv(["prog", "--attacks=fgsm", "--attack_sizes=0.3", "--attack_size_range=0,1",
        "--certify", "--bound=hoeffding", "--num_draws=50"])
    values = {f: (tuple(fv[o.name].value) if isinstance(fv[o.name].value, list)
                  else fv[o.name].value) for f, o in declared}
    got = eval_options.EvalOptions(**values)
    assert got == eval_options.EvalOptions(
        attacks=("fgsm",), attack_sizes=("0.3",), size_range=("0", "1"), certify=True,
        bound="hoeffding", num_draws=50)
    checked = evaluate.validate_options(got)
    assert checked.attack_sizes == (0.3,) and checked.size_range == (0.0, 1.0)


def test_evaluate_reexports_the_options_and_the_app_help_needs_no_tensorflow():
    assert evaluate.EvalOptions is eval_options.EvalOptions
    assert evaluate.apply_attack_preset is eval_options.apply_attack_preset
    code = ("import sys, tfdp.apps.evaluate; "
            "sys.exit(1 if 'tensorflow' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
