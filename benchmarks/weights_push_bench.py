"""Seconds per weight push to a model server: the file route against vLLM's transfer routes.

    .venv/bin/python benchmarks/weights_push_bench.py                 # tiny + ~100M params
    .venv/bin/python benchmarks/weights_push_bench.py --sizes tiny --pushes 20

One ``codegym serve-model`` (in a thread of this process, ``ModelServer``, loopback) per
model with ``--weight-transfer`` on; the arms take turns in blocks of 3 pushes of the
same (each time slightly changed) state dict, so the machine's drift hits them alike; the
first push of a block is not timed (a gloo arm joins the server's group again there, since
the other gloo arm replaced it):
  file          ``HttpWeightsHook``: write one ``.safetensors`` under a temp folder, then
                ``POST /v1/weights``; the server reads it and swaps it in;
  gloo packed   ``CollectiveWeightsHook``: /pause, /start_weight_update, /update_weights
                with the tensors broadcast over gloo in 64 MiB buckets,
                /finish_weight_update, /resume (the group joined once, before timing);
  gloo          the same, one broadcast per tensor.
Both sides run on this machine's CPUs, so the figures are what the protocol costs here,
not what NCCL between GPUs would. Medians over the timed pushes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from codegym.models import ensure_tiny_model
from codegym.serving import build_random_model
from codegym.serving.server import ModelServer
from codegym.train.weights_collective import CollectiveWeightsHook
from codegym.train.weights_http import HttpWeightsHook

SIZES = {
    "tiny": None,  # the demo's model
    "100M": {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 512, "vocab_size": 320},
}


def model_dir(size: str, root: Path) -> Path:
    spec = SIZES[size]
    if spec is None:
        return ensure_tiny_model()
    return build_random_model(root / size, **spec)


def bench(size: str, pushes: int, root: Path) -> None:
    folder = model_dir(size, root)
    model = AutoModelForCausalLM.from_pretrained(folder)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    params = sum(p.numel() for p in model.parameters())
    mb = sum(v.numel() * v.element_size() for v in state.values()) / 2**20
    with ModelServer(folder, weight_transfer=True, torch_threads=1) as srv:
        arms = {
            "file": HttpWeightsHook(srv.base_url, root / f"stage-{size}"),
            "gloo packed": CollectiveWeightsHook(srv.base_url, packed=True),
            "gloo": CollectiveWeightsHook(srv.base_url, packed=False),
        }
        times: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(-(-pushes // 2)):
            for name, hook in arms.items():
                for k in range(3):
                    with torch.no_grad():
                        for v in state.values():
                            v.add_(1e-6)  # new weights each push
                    t0 = time.perf_counter()
                    hook.load_weights(state)
                    if k:
                        times[name].append(time.perf_counter() - t0)
        for hook in arms.values():
            hook.close()
    n = len(times["file"])
    print(
        f"\n{size}: {params / 1e6:.1f}M parameters, {mb:.0f} MiB float32, {n} timed pushes an arm"
    )
    base = statistics.median(times["file"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"  {name:12s} median {med * 1000:8.1f} ms  (min {min(ts) * 1000:.1f}, "
            f"max {max(ts) * 1000:.1f})  {base / med:5.2f}x the file route"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--pushes", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            bench(size, args.pushes, Path(tmp))


if __name__ == "__main__":
    main()
