"""The optional tensorflow-privacy shim, and agreement with TF-Privacy when it is installed."""

import sys
import textwrap

import pytest

from tfdp import tf_privacy_shim
from tfdp.accounting import dpsgd_epsilon

_LIB = "tensorflow_privacy.privacy.analysis.compute_dp_sgd_privacy_lib"


def test_agreement_with_tf_privacy():
    if not tf_privacy_shim.available():
        pytest.skip("tensorflow-privacy is not installed (optional; the Makefile installs it); "
                    "test_shim_with_stand_in_package covers the shim itself")
    # Measured with TF-Privacy: n = 60000, batch 256, sigma 1.1, 60 epochs, delta 1e-5 -> 2.597.
    theirs = tf_privacy_shim.compute_dp_sgd_privacy(num_examples=60000, batch_size=256,
                                                    noise_multiplier=1.1, epochs=60, delta=1e-5)
    ours = dpsgd_epsilon(num_examples=60000, batch_size=256, noise_multiplier=1.1, epochs=60,
                         delta=1e-5, accountant="rdp")
    assert theirs == pytest.approx(2.597, abs=5e-4)
    assert ours == pytest.approx(theirs, rel=1e-3)


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A minimal stand-in tensorflow_privacy package whose __init__ fails unless the flag is set."""
    pkg = tmp_path / "tensorflow_privacy"
    (pkg / "privacy" / "analysis").mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import sys
        if not getattr(sys, "skip_tf_privacy_import", False):
            raise ImportError("No module named 'tensorflow_estimator'")
    """))
    (pkg / "privacy" / "__init__.py").write_text("")
    (pkg / "privacy" / "analysis" / "__init__.py").write_text("")
    (pkg / "privacy" / "analysis" / "compute_dp_sgd_privacy_lib.py").write_text(textwrap.dedent("""
        def compute_dp_sgd_privacy(n, batch_size, noise_multiplier, epochs, delta):
            return (n * 1e-5 + batch_size * 1e-3 + noise_multiplier + epochs + delta, 8.0)
    """))
    saved = {k: v for k, v in sys.modules.items() if k.startswith("tensorflow_privacy")}
    for k in saved:
        del sys.modules[k]
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delattr(sys, "skip_tf_privacy_import", raising=False)
    yield
    for k in [k for k in sys.modules if k.startswith("tensorflow_privacy")]:
        del sys.modules[k]
    sys.modules.update(saved)


def test_shim_with_stand_in_package(stand_in):
    assert tf_privacy_shim.available()
    assert sys.skip_tf_privacy_import is True  # set before the package was imported
    eps = tf_privacy_shim.compute_dp_sgd_privacy(num_examples=1000, batch_size=10,
                                                 noise_multiplier=1.0, epochs=2, delta=1e-5)
    assert eps == pytest.approx(0.01 + 0.01 + 1.0 + 2 + 1e-5)


def test_shim_when_absent(tmp_path, monkeypatch):
    # Hide the package whether or not it is installed: a None entry in sys.modules makes
    # every import of it raise ImportError, as on a machine without tensorflow-privacy.
    for k in [k for k in sys.modules if k.startswith("tensorflow_privacy")]:
        monkeypatch.delitem(sys.modules, k)
    monkeypatch.setitem(sys.modules, "tensorflow_privacy", None)
    assert not tf_privacy_shim.available()
    assert tf_privacy_shim.get_module(_LIB) is None
    with pytest.raises(ImportError, match="tensorflow-privacy"):
        tf_privacy_shim.get_module(_LIB, required=True)
    with pytest.raises(ImportError, match="tensorflow-privacy"):
        tf_privacy_shim.compute_dp_sgd_privacy(num_examples=10, batch_size=1,
                                               noise_multiplier=1.0, epochs=1, delta=1e-5)
    with pytest.raises(ValueError, match="name"):
        tf_privacy_shim.get_module("numpy")
