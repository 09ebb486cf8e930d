"""Keras 3 layers of tfdp: noise injection, bounding and normalisation layers (and AdLM's)."""

from layers.adlm import BatchStatNorm, BiasNoise, CropStandardize
from layers.autoencoder import DPAutoEncoderConv
from layers.bounding import BoundedLRN, Clip, MinMaxBound
from layers.control import set_inference_noise
from layers.noise import (NOISE_MODES, GaussianNoise, HeterogeneousGaussianNoise,
                          LaplaceNoise)

__all__ = [
    "NOISE_MODES",
    "BatchStatNorm",
    "BiasNoise",
    "BoundedLRN",
    "Clip",
    "CropStandardize",
    "DPAutoEncoderConv",
    "GaussianNoise",
    "HeterogeneousGaussianNoise",
    "LaplaceNoise",
    "MinMaxBound",
    "set_inference_noise",
]
