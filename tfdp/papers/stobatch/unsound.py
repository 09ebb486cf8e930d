"""StoBatch's training options whose certificates are only claimed (registry kind
"unsound_options"; `tfdp.certify.registry.unsound_training_options` reads every paper's)."""

from __future__ import annotations

from typing import Any, Mapping


def unsound_options(options: Mapping[str, Any]) -> list[str]:
    """The stobatch_* options (flag=value) of the code release's radius scaling: a radius
    divisor below 1, a delta_rx mode other than "unit", the psi correction off; and the code
    release's classifier path (`--stobatch_classifier_h=release_pre_relu`)."""
    found = []
    divisor = options.get("stobatch_radius_divisor")
    if divisor is not None and float(divisor) < 1.0:
        found.append(f"--stobatch_radius_divisor={divisor}")
    rx_mode = options.get("stobatch_delta_rx_mode")
    if rx_mode not in (None, "unit"):
        found.append(f"--stobatch_delta_rx_mode={rx_mode}")
    if options.get("stobatch_radius_psi_correction") is False:
        found.append("--nostobatch_radius_psi_correction")
    # The release's classifier path: the latent noise before an unclipped ReLU and a batch
    # norm, where the certificate's sensitivity Delta_r^h assumes h_bar (the clipped h).
    if options.get("stobatch_classifier_h") not in (None, "shared"):
        found.append(f"--stobatch_classifier_h={options['stobatch_classifier_h']}")
    return found
