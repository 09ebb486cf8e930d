"""Keras 3 layers of tfdp: noise injection, bounding and normalisation layers (and AdLM's)."""

from layers.adlm import BatchStatNorm, BiasNoise, CropStandardize
from layers.autoencoder import DPAutoEncoderConv
from layers.bounding import BoundedLRN, Clip, MinMaxBound
from layers.control import noise_layers, set_inference_noise, set_noise_seeds
from layers.noise import (NOISE_KERNELS, NOISE_MODES, GaussianNoise,
                          HeterogeneousGaussianNoise, LaplaceNoise, get_noise_kernel,
                          noise_kernel, set_noise_kernel)

__all__ = [
    "NOISE_KERNELS",
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
    "get_noise_kernel",
    "noise_kernel",
    "noise_layers",
    "set_inference_noise", "set_noise_seeds",
    "set_noise_kernel",
]
