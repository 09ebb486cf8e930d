"""The PyTorch systems of `tfdp-bench keras_fit`, timed in their own process.

Same line protocol as `tfdp.bench.keras_fit_worker`: after building the model and one untimed
warm-up epoch it prints {"ready": true, ...}; for every line "run" on stdin it trains one
epoch and prints {"ms_per_step": median of the epoch's step times, ...}; "quit" ends it.

Systems (the benchmark's user models rebuilt in PyTorch, the same data, lot size, clip and
noise multiplier):
  torch-nonprivate: a plain PyTorch training loop over shuffled batches;
  opacus: Opacus' `PrivacyEngine().make_private` (Poisson-sampled lots, per-example gradients
    by its grad-sample hooks, clipping and noise in its DPOptimizer).

This module imports only numpy and torch (and opacus): it runs in a separate environment
holding them (`--keras_bench_opacus_python`). The parent passes the training arrays in an
.npz file (channels-last images, integer labels).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import numpy as np

SYSTEMS = ("torch-nonprivate", "opacus")


def build_model(name: str, nn: Any) -> Any:
    """The benchmark's models (`keras_fit_worker.build_model`) in PyTorch, NCHW.

    mnist: the README CNN (conv 16 8x8/2 "same" = padding 3, max-pool 2/1, conv 32 4x4/2,
    max-pool 2/1, dense 32, logits). cifar10: the residual network with GroupNorm (4 groups),
    3 stages of 16/32/64 channels; Keras' "same" padding of a stride-2 3x3 convolution pads
    (0, 1), PyTorch's padding=1 pads (1, 1): the same shapes and cost.
    """
    if name == "mnist":
        return nn.Sequential(
            nn.Conv2d(1, 16, 8, stride=2, padding=3), nn.ReLU(), nn.MaxPool2d(2, 1),
            nn.Conv2d(16, 32, 4, stride=2), nn.ReLU(), nn.MaxPool2d(2, 1), nn.Flatten(),
            nn.Linear(32 * 4 * 4, 32), nn.ReLU(), nn.Linear(32, 10))

    class Block(nn.Module):
        def __init__(self, cin: int, filters: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, filters, 3, stride=stride, padding=1, bias=False)
            self.norm1 = nn.GroupNorm(4, filters)
            self.conv2 = nn.Conv2d(filters, filters, 3, padding=1, bias=False)
            self.norm2 = nn.GroupNorm(4, filters)
            self.skip = (nn.Conv2d(cin, filters, 1, stride=stride, bias=False)
                         if stride != 1 or cin != filters else nn.Identity())
            self.relu = nn.ReLU()

        def forward(self, x):
            h = self.relu(self.norm1(self.conv1(x)))
            return self.relu(self.norm2(self.conv2(h)) + self.skip(x))

    layers = [nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.GroupNorm(4, 16), nn.ReLU()]
    cin = 16
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        layers.append(Block(cin, filters, stride))
        cin = filters
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def _setup(args: Any, x: np.ndarray, y: np.ndarray):
    try:
        # optional: torch lives only in the peer environment, never a tfdp dependency
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise RuntimeError(f"skipped: torch is not installed ({e})") from None
    torch.manual_seed(args.seed)
    nn = torch.nn
    model = build_model(args.model, nn)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    xt = torch.tensor(np.transpose(x, (0, 3, 1, 2)).copy())
    yt = torch.tensor(y.astype(np.int64))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xt, yt),
                                         batch_size=args.batch_size, shuffle=True)
    info = {"torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    if args.system == "opacus":
        try:
            # optional: opacus lives only in the peer environment, never a tfdp dependency
            import opacus  # pylint: disable=import-outside-toplevel
        except ImportError as e:
            raise RuntimeError(f"skipped: opacus is not installed ({e})") from None
        engine = opacus.PrivacyEngine()
        model, optimizer, loader = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader,
            noise_multiplier=args.noise_multiplier, max_grad_norm=args.l2_clip,
            poisson_sampling=True)
        info["opacus"] = opacus.__version__
    loss_fn = nn.CrossEntropyLoss()
    times: list[float] = []

    def epoch() -> None:
        model.train()
        batches = iter(loader)
        while True:
            start = time.perf_counter()
            try:
                xb, yb = next(batches)
            except StopIteration:
                return
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            float(loss.detach())
            times.append(1000.0 * (time.perf_counter() - start))

    return epoch, times, info


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=SYSTEMS, required=True)
    parser.add_argument("--model", choices=("mnist", "cifar10"), required=True)
    parser.add_argument("--data_file", required=True)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--l2_clip", type=float, default=1.0)
    parser.add_argument("--noise_multiplier", type=float, default=1.1)
    parser.add_argument("--seed", type=int, default=0)
    args, _ = parser.parse_known_args(argv)
    with np.load(args.data_file) as arrays:
        x, y, source = arrays["x"], arrays["y"], str(arrays["source"])
    try:
        epoch, times, info = _setup(args, x, y)
    except RuntimeError as e:
        print(json.dumps({"skipped": str(e)}), flush=True)
        return
    epoch()  # warm-up
    print(json.dumps({"ready": True, "data": source, **info}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        times.clear()
        epoch()
        kept = times[1:]  # the first step also starts the loader's iterator
        print(json.dumps({"ms_per_step": statistics.median(kept),
                          "mean_ms_per_step": statistics.fmean(kept),
                          "steps": len(kept)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
