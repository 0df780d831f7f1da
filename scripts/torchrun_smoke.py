"""tl.train under torchrun, on whatever devices torchrun was given: a smoke test of parallel="ddp" and "fsdp".

    torchrun --standalone --nproc_per_node=1 scripts/torchrun_smoke.py --device cuda    # one GPU (gpu_run.sh)
    torchrun --standalone --nproc_per_node=2 scripts/torchrun_smoke.py --device cpu     # two CPU processes

For each of one process (``parallel=None``, the reference, run by every rank alone), ``"ddp"`` and
``"fsdp"``, it trains the same small GPT on the same batches (a learnable synthetic sequence: no data
files needed) with the default mixed precision, and checks: the loss falls; the parameters end
close to the reference's; a run resumed from its half-way checkpoint ends where the uninterrupted
run ended. On a GPU "close" allows for bf16 autocast and kernels that are not bit-reproducible
(``--tolerance``). Rank 0 writes what it measured to ``--out`` (JSON) and prints it; the exit status
is 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's transformer_lib, wherever the script is started from

import transformer_lib as tl  # noqa: E402
from transformer_lib import distributed  # noqa: E402

SIZES = {  # layers, heads, d_model, context, batch (a multiple of 8: any world size up to 8 shares it)
    "small": (4, 4, 256, 128, 32),
    "tiny": (2, 4, 32, 16, 8),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--size", choices=sorted(SIZES), default=None, help="default: small on a GPU, tiny on a CPU")
    p.add_argument("--steps", type=int, default=None, help="default: 60 on a GPU, 6 on a CPU")
    p.add_argument("--tolerance", type=float, default=None,
                   help="largest parameter difference allowed (default: 1e-2 on a GPU, 2e-5 on a CPU)")
    p.add_argument("--out", type=Path, default=None, help="JSON results (rank 0)")
    args = p.parse_args(argv)
    gpu = args.device.startswith("cuda")
    size = SIZES[args.size or ("small" if gpu else "tiny")]
    steps = args.steps or (60 if gpu else 6)
    tolerance = args.tolerance if args.tolerance is not None else (1e-2 if gpu else 2e-5)
    if not gpu:
        torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if not distributed.launched_by_torchrun():
        print("run me under torchrun: torchrun --standalone --nproc_per_node=1 scripts/torchrun_smoke.py")
        return 2

    n_layers, n_heads, d_model, n_ctx, batch = size
    vocab = 67
    data = (torch.arange(200_000) * 7 + torch.arange(200_000) // 11) % vocab  # something to learn

    def make_model():
        torch.manual_seed(0)
        return tl.GPT2(tl.GPT2Config(vocab_size=vocab, n_ctx=n_ctx, d_model=d_model, n_layers=n_layers,
                                     n_heads=n_heads))

    # join the process group, and share rank 0's scratch folder: checkpoints go where every rank sees them
    group = distributed.start("ddp", args.device)
    scratch = Path(group.broadcast(tempfile.mkdtemp(prefix="tfs-smoke-") if rank == 0 else None))
    results: dict = {"device": torch.cuda.get_device_name() if gpu else "cpu", "torch": torch.__version__,
                     "world_size": world, "steps": steps, "tolerance": tolerance, "runs": {},
                     "size": dict(zip(("n_layers", "n_heads", "d_model", "n_ctx", "batch"), size))}
    failures = []

    def run(kind, folder=None, every=None):
        model = make_model()
        config = tl.TrainConfig(max_steps=steps, lr=3e-3, warmup_steps=max(1, steps // 10), eval_interval=steps,
                                eval_steps=2, device=args.device, progress=False, parallel=kind,
                                checkpoint_dir=folder, checkpoint_every=every)
        start = time.perf_counter()
        state = tl.train(model, tl.BatchSampler(data, batch, n_ctx, seed=0),
                         tl.BatchSampler(data, batch, n_ctx, seed=1), config)
        seconds = time.perf_counter() - start
        return distributed.full_state_dict(model), state, seconds  # the weights on rank 0

    def largest_difference(a, b):
        return max((a[k].float() - b[k].float()).abs().max().item() for k in a)

    def check(entry, name, value, what):
        entry[name] = value
        if value > tolerance:
            failures.append(f"{what} differ by {value:.2e} > {tolerance}")

    weights = {}
    try:
        if world == 1:  # the reference: one process, no DDP or FSDP (parallel=None needs a world of one)
            weights[None], state, seconds = run(None)
            results["runs"]["one process"] = {"seconds": round(seconds, 2), "val_loss": round(state.val_loss, 4)}
        for kind in ("ddp", "fsdp"):
            folder = scratch / kind
            weights[kind], state, seconds = run(kind, folder, every=steps // 2)
            first, last = state.history[0]["val_loss"], state.history[-1]["val_loss"]
            entry = results["runs"][kind] = {
                "seconds": round(seconds, 2), "tokens_per_s": round(steps * batch * n_ctx / seconds),
                "val_loss_first": round(first, 4), "val_loss_last": round(last, 4)}
            if not last < first - 0.1:
                failures.append(f"{kind}: the validation loss did not fall ({first:.3f} -> {last:.3f})")
            # resume: without the last checkpoint, a new run continues from the half-way one
            if rank == 0:
                shutil.rmtree(sorted(folder.glob("step-*"))[-1])
            group.barrier()
            resumed, _, _ = run(kind, folder, every=steps // 2)
            if rank == 0:
                check(entry, "resumed_vs_uninterrupted", largest_difference(resumed, weights[kind]),
                      f"{kind}: the resumed and the uninterrupted run's parameters")
                if world == 1:
                    check(entry, "vs_one_process", largest_difference(weights[kind], weights[None]),
                          f"{kind}: its parameters and one process's")
        if rank == 0:
            check(results, "ddp_vs_fsdp", largest_difference(weights["ddp"], weights["fsdp"]),
                  "DDP's and FSDP's parameters")
    finally:
        if rank == 0:
            shutil.rmtree(scratch, ignore_errors=True)
    if rank == 0:
        results["failures"] = failures
        text = json.dumps(results, indent=1)
        print(text)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text + "\n")
        print("torchrun smoke: " + ("passed" if not failures else "FAILED: " + "; ".join(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
