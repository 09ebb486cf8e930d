"""tfdp: differential privacy in deep learning (AdLM, HGM/Secure-SGD, StoBatch, GPM) on TF2/Keras 3."""

from tfdp import quiet_start as _quiet_start

__version__ = "0.1.0"

# TensorFlow's start-up notices are held back wherever tfdp is used (apps, python -m, the
# Python API); any other output of the import is passed on (tfdp/quiet_start.py).
_quiet_start.install()
