"""Tests of tfdp.checks: accepted values and ValueErrors that name the argument."""

import math
import subprocess
import sys

import numpy as np
import pytest

from tfdp import checks

NAN = float("nan")
INF = float("inf")

# ----------------------------------------------------------------------------------------
# Floats.


@pytest.mark.parametrize("value,expected", [
    (1, 1.0), (2.5, 2.5), (-3.0, -3.0), (0, 0.0), (np.float32(0.5), 0.5), (np.int64(7), 7.0),
    (np.array(4.0), 4.0),
])
def test_as_float_accepts_numbers(value, expected):
    out = checks.as_float(value, "x")
    assert out == expected and type(out) is float


@pytest.mark.parametrize("value", [True, False, np.bool_(True), "1.0", b"1", None, [1.0],
                                   np.ones(2), NAN, INF, -INF, object()])
def test_as_float_rejects_with_name(value):
    with pytest.raises(ValueError, match="my_arg"):
        checks.as_float(value, "my_arg")


def test_as_float_allow_nonfinite():
    assert checks.as_float(INF, "x", allow_nonfinite=True) == INF
    assert math.isnan(checks.as_float(NAN, "x", allow_nonfinite=True))
    with pytest.raises(ValueError, match="x must be a number"):
        checks.as_float("inf", "x", allow_nonfinite=True)


def test_check_finite():
    assert checks.check_finite(-2, "x") == -2.0
    assert checks.check_finite(0.0, "x", minimum=0.0) == 0.0
    assert checks.check_finite(0.5, "x", minimum=0.0, strict=True) == 0.5
    for bad in (NAN, INF, -INF, True, "3", None):
        with pytest.raises(ValueError, match="the_value"):
            checks.check_finite(bad, "the_value")
    with pytest.raises(ValueError, match="the_value must be a finite number >= 1"):
        checks.check_finite(0.5, "the_value", minimum=1.0)
    with pytest.raises(ValueError, match="the_value must be a finite number > 0"):
        checks.check_finite(0.0, "the_value", minimum=0.0, strict=True)
    with pytest.raises(ValueError, match="the_value"):
        checks.check_finite(NAN, "the_value", minimum=0.0)


@pytest.mark.parametrize("check,good,bad,phrase", [
    (checks.check_positive, [1e-12, np.float64(3), 7], [0, 0.0, -1.0], "> 0"),
    (checks.check_nonnegative, [0, 0.0, 2.5], [-1e-9, -1.0], ">= 0"),
])
def test_check_positive_and_nonnegative(check, good, bad, phrase):
    for value in good:
        assert check(value, "x") == float(value)
    for value in bad + [NAN, INF, -INF, True, False, "1", None]:
        with pytest.raises(ValueError, match="attack_size"):
            check(value, "attack_size")
    with pytest.raises(ValueError, match=f"attack_size must be a finite number {phrase}"):
        check(-1.0, "attack_size")


def test_check_unit_interval():
    assert checks.check_unit_interval(0.05, "alpha") == 0.05
    for bad in (0.0, 1.0, -0.1, 1.5, NAN, INF, True, "0.5", None):
        with pytest.raises(ValueError, match="alpha"):
            checks.check_unit_interval(bad, "alpha")
    with pytest.raises(ValueError, match=r"alpha must lie in the open interval \(0, 1\)"):
        checks.check_unit_interval(1.0, "alpha")


# ----------------------------------------------------------------------------------------
# Integers.


def test_check_int():
    assert checks.check_int(3, "n") == 3
    out = checks.check_int(np.int32(-4), "n")
    assert out == -4 and type(out) is int
    assert checks.check_int(5, "n", minimum=5, maximum=5) == 5
    assert checks.check_int(None, "n", allow_none=True) is None
    assert checks.check_int(10.0, "n", allow_integral_float=True) == 10
    for bad in (True, 2.0, 2.5, "2", None, NAN, INF, [1]):
        with pytest.raises(ValueError, match="count"):
            checks.check_int(bad, "count")
    for bad in (2.5, NAN, INF, True):
        with pytest.raises(ValueError, match="count"):
            checks.check_int(bad, "count", allow_integral_float=True)
    with pytest.raises(ValueError, match="count must be an integer >= 1"):
        checks.check_int(0, "count", minimum=1)
    with pytest.raises(ValueError, match="count must be an integer <= 3"):
        checks.check_int(4, "count", maximum=3)


def test_check_positive_int():
    assert checks.check_positive_int(1, "batch_size") == 1
    assert checks.check_positive_int(np.int64(8), "batch_size") == 8
    assert checks.check_positive_int(None, "batch_size", allow_none=True) is None
    for bad in (0, -1, 1.0, 2.5, True, "3", None, NAN, INF):
        with pytest.raises(ValueError, match="batch_size"):
            checks.check_positive_int(bad, "batch_size")
    assert checks.check_positive_int(10.0, "num_draws", allow_integral_float=True) == 10
    for bad in (0.0, 2.5, INF, NAN, True):
        with pytest.raises(ValueError, match="num_draws must be an integer >= 1"):
            checks.check_positive_int(bad, "num_draws", allow_integral_float=True)


def test_check_seed():
    assert checks.check_seed(None) is None
    assert checks.check_seed(0) == 0
    assert checks.check_seed(2**70) == 2**70
    assert checks.check_seed(2**63 - 1, maximum=2**63 - 1) == 2**63 - 1
    for bad in (-1, 1.5, 1.0, True, "1", NAN, INF):
        with pytest.raises(ValueError, match="shuffle_seed"):
            checks.check_seed(bad, "shuffle_seed")
    with pytest.raises(ValueError, match="seed"):
        checks.check_seed(2**63, maximum=2**63 - 1)


# ----------------------------------------------------------------------------------------
# Pairs and arrays.


def test_check_interval():
    assert checks.check_interval((-1, 1), "value_range") == (-1.0, 1.0)
    assert checks.check_interval(np.array([0.0, 0.5]), "value_range") == (0.0, 0.5)
    for bad in ((1.0, 1.0), (1.0, 0.0), (NAN, 1.0), (0.0, INF), (0.0,), (0.0, 1.0, 2.0), "ab",
                3, None, (True, 2.0), ("0", "1")):
        with pytest.raises(ValueError, match="value_range"):
            checks.check_interval(bad, "value_range")
    with pytest.raises(ValueError, match="value_range must be finite with low < high"):
        checks.check_interval((2, 1), "value_range")


def test_check_nonnegative_array():
    np.testing.assert_array_equal(checks.check_nonnegative_array([0, 1.5], "scale"), [0.0, 1.5])
    assert checks.check_nonnegative_array(2, "scale").dtype == np.float64
    assert checks.check_nonnegative_array([], "scale").size == 0
    for bad in ([1.0, -1.0], [NAN], [INF], "abc", None, [[1.0], [1.0, 2.0]]):
        with pytest.raises(ValueError, match="scale"):
            checks.check_nonnegative_array(bad, "scale")
    with pytest.raises(ValueError, match="scale must not be empty"):
        checks.check_nonnegative_array([], "scale", allow_empty=False)


def test_check_shape():
    assert checks.check_shape((28, 28, 1), "input_shape") == (28, 28, 1)
    assert checks.check_shape([np.int64(4), 2.0], "input_shape") == (4, 2)
    assert checks.check_shape((32, 32, 3), "input_shape", rank=3) == (32, 32, 3)
    for bad in ((), (28, 0, 1), (28, -1), (2.5,), ("a",), None, 3, (True, 2)):
        with pytest.raises(ValueError, match="input_shape must have positive integer dim"):
            checks.check_shape(bad, "input_shape")
    with pytest.raises(ValueError, match=r"input_shape must have .* \(3 of them\)"):
        checks.check_shape((28, 28), "input_shape", rank=3)


# ----------------------------------------------------------------------------------------
# Choices and generators.


def test_check_choice():
    assert checks.check_choice("mean", "reduction", ("mean", "sum")) == "mean"
    assert checks.check_choice(2, "order", {1, 2}) == 2
    for bad in ("Mean", None, ["mean"], 1.5):
        with pytest.raises(ValueError, match=r"reduction must be one of \('mean', 'sum'\), got"):
            checks.check_choice(bad, "reduction", ("mean", "sum"))
    with pytest.raises(ValueError, match="order must be one of"):
        checks.check_choice([1], "order", {1, 2})  # unhashable against a set


def test_check_rng():
    rng = np.random.default_rng(0)
    assert checks.check_rng(rng) is rng
    for bad in (None, 0, np.random.RandomState(0), np.random):
        with pytest.raises(ValueError, match="rng must be a numpy.random.Generator"):
            checks.check_rng(bad)
    with pytest.raises(ValueError, match="key_rng must be"):
        checks.check_rng(1, "key_rng")


# ----------------------------------------------------------------------------------------
# Module properties.


def test_validate_reexports_the_shared_checks():
    from tfdp.mechanisms import _validate
    assert _validate.as_float is checks.as_float
    assert _validate.check_positive is checks.check_positive
    assert _validate.check_rng is checks.check_rng


def test_no_private_generic_validators_left():
    # The generic validators live in tfdp.checks only; these modules keep no private copies.
    import ast
    import pathlib
    root = pathlib.Path(checks.__file__).resolve().parents[1]
    generic = {"_check_int", "_check_count", "_check_rng", "_check_eps", "_check_range",
               "_check_reduction", "_check_bound", "_check_alpha", "_check_num_draws",
               "_check_shape", "_check", "_positive", "_positive_int", "_unit_interval"}
    files = ["attacks/core.py", "tfdp/accounting.py", "tfdp/certify/core.py", "tfdp/certify/registry.py",
             "tfdp/data/api.py",
             "tfdp/losses.py", "tfdp/models/common.py", "tfdp/papers/adlm/models.py"]
    files += [str(p.relative_to(root)) for d in ("tfdp/audit", "tfdp/mechanisms", "tfdp/gpm")
              for p in sorted((root / d).glob("*.py"))]
    for name in files:
        tree = ast.parse((root / name).read_text())
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert not defined & generic, (name, defined & generic)


def test_import_does_not_load_tensorflow():
    code = ("import sys, tfdp.checks, tfdp.data; "
            "sys.exit(1 if 'tensorflow' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
