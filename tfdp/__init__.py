"""tfdp: differential privacy in deep learning (AdLM, HGM/Secure-SGD, StoBatch, GPM) on TF2/Keras 3."""

__version__ = "0.1.0"
