"""Installable tfdp: differential privacy in deep learning on TensorFlow 2 / Keras 3."""
from setuptools import find_packages, setup

setup(
    name="tfdp",
    version="0.1.0",
    description=("Differential privacy in deep learning: AdLM, HGM / Secure-SGD, StoBatch, "
                 "GPM, with certified robustness and noise audits (TensorFlow 2 / Keras 3)."),
    python_requires=">=3.10",
    packages=find_packages(include=["tfdp", "tfdp.*", "layers", "layers.*", "attacks",
                                     "attacks.*"]),
    package_data={"tfdp": ["data_files/*.npz", "kernels/*.cc"]},
    install_requires=[
        "keras>=3.15,<4",
        "numpy>=2.0,<3",
        "scipy>=1.13",
        "absl-py>=2.1",
        "matplotlib>=3.8",
        "dp-accounting>=0.6,<0.7",
        "pillow>=10",
        "h5py>=3.10",  # tfdp-reproduce digests saved weights (keras depends on it too)
    ],
    # TensorFlow comes through an extra, because the CPU and the CUDA builds are different
    # distributions that must not be installed side by side:
    #   pip install -e .[cpu]   (what requirements.txt pins)
    #   pip install -e .[gpu]   (tensorflow[and-cuda], for machines with NVIDIA GPUs)
    extras_require={
        "cpu": ["tensorflow-cpu>=2.21,<2.22"],
        "gpu": ["tensorflow[and-cuda]>=2.21,<2.22"],
        "test": ["pytest>=8", "pytest-xdist>=3", "build>=1"],  # build: tests/keras/test_wheel.py
        # Viewing a run's logs/ (the event files are written without it):
        #   pip install -e '.[tensorboard]'; tensorboard --logdir runs/
        "tensorboard": ["tensorboard>=2.21,<2.22"],
        # Peers timed by `tfdp-bench dpsgd` (optional; large: PyTorch is several GB):
        #   pip install -e '.[bench-peers]'
        # The authors' TF1 releases run by `tfdp-release` (tf.contrib.layers comes from tf_slim):
        #   pip install -e '.[releases]'
        "releases": ["tf-slim>=1.1"],
        "bench-peers": ["tf-keras>=2.21,<2.22", "tensorflow-privacy>=0.9", "torch>=2.2",
                        "opacus>=1.5"],
    },
    entry_points={
        "console_scripts": [
            "tfdp-train=tfdp.apps.train:run",
            "tfdp-evaluate=tfdp.apps.evaluate:run",
            "tfdp-audit=tfdp.apps.audit:run",
            "tfdp-bench=tfdp.apps.bench:run",
            "tfdp-export=tfdp.apps.export:run",
            "tfdp-reproduce=tfdp.apps.reproduce:run",
            "tfdp-runs=tfdp.apps.runs:run",
            "tfdp-publish=tfdp.apps.publish:run",
            "tfdp-release=tfdp.apps.release:run",
        ],
    },
)
