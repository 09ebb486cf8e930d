"""HGM's training options whose certificates are only claimed (registry kind
"unsound_options"; `tfdp.certify.registry.unsound_training_options` reads every paper's)."""

from __future__ import annotations

from typing import Any, Mapping

# Sensitivity modes that are not proven bounds (docs/hgm.md, "Noised layer's sensitivity").
UNSOUND_SENSITIVITY_MODES = ("per_map", "code_spectral")


# Code-release options that leave conv1's sensitivity unbounded, with the paper's (sound)
# value of each (docs/reproduce.md, Secure-SGD at the release's settings).
RELEASE_OPTIONS = (("hgm_conv1", "normalised"), ("hgm_noise_mixture", "hgm"))


def release_unsound_options(options: Mapping[str, Any]) -> list[str]:
    """The code-release hgm_* options (flag=value) that leave conv1's sensitivity unbounded."""
    return [f"--{name}={options[name]}" for name, paper in RELEASE_OPTIONS
            if options.get(name, paper) != paper]


def unsound_options(options: Mapping[str, Any]) -> list[str]:
    """The hgm_* options (flag=value) whose certificates would not be sound."""
    mode = options.get("hgm_sensitivity_mode")
    found = [f"--hgm_sensitivity_mode={mode}"] if mode in UNSOUND_SENSITIVITY_MODES else []
    return found + release_unsound_options(options)
