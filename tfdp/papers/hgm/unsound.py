"""HGM's training options whose certificates are only claimed (registry kind
"unsound_options"; `tfdp.certify.registry.unsound_training_options` reads every paper's)."""

from __future__ import annotations

from typing import Any, Mapping

# Sensitivity modes that are not proven bounds (docs/hgm.md, "Noised layer's sensitivity").
UNSOUND_SENSITIVITY_MODES = ("per_map", "code_spectral")


def unsound_options(options: Mapping[str, Any]) -> list[str]:
    """The hgm_* options (flag=value) whose certificates would not be sound."""
    mode = options.get("hgm_sensitivity_mode")
    return [f"--hgm_sensitivity_mode={mode}"] if mode in UNSOUND_SENSITIVITY_MODES else []
