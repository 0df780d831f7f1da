"""Does a change slow the happy path? Times tl.TrainStep of this checkout against another revision's.

Both libraries are imported into one process (the other revision's ``transformer_lib`` from
``git archive``, under another package name), the same model is built in each from the same seed,
and their training steps are timed in turn, round after round (``speed.time_interleaved``), so that
load from other programs hits both alike. On one PyTorch thread, as the chapters run on a CPU.

    .venv/bin/python scripts/compare_step.py f5a8e47            # baby GPT and a tiny one, ~2 minutes
    .venv/bin/python scripts/compare_step.py f5a8e47 --rounds 40

Prints each model's median milliseconds per step for both, their ratio with the spread of the
per-round ratios, and the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import transformer_lib as tl  # noqa: E402  (this checkout's)

# (layers, heads, d_model, context, batch): nanoGPT's CPU "baby" run, and a tiny model where fixed
# per-call costs (argument checks) weigh the most
MODELS = {"baby GPT (4 x 128, ctx 64, batch 12)": (4, 4, 128, 64, 12),
          "tiny GPT (2 x 32, ctx 16, batch 4)": (2, 2, 32, 16, 4)}


def library_at(revision: str, folder: Path):
    """``transformer_lib`` as it was at ``revision``, imported as ``transformer_lib_<revision>``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "transformer_lib"],
                             capture_output=True, check=True).stdout
    name = f"transformer_lib_{revision.replace('-', '_').replace('.', '_')}"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "transformer_lib").rename(folder / name)
    sys.path.insert(0, str(folder))
    return importlib.import_module(name)


def step_of(lib, layers: int, heads: int, d_model: int, ctx: int, batch: int, fast: bool):
    """One ``TrainStep`` as ``tl.train`` takes it (its fast path on or off), on random character ids."""
    torch.manual_seed(0)
    model = lib.GPT2(lib.GPT2Config(vocab_size=65, n_ctx=ctx, d_model=d_model, n_layers=layers,
                                    n_heads=heads)).train()
    step = lib.TrainStep(model, lib.TrainConfig(device="cpu", progress=False, max_steps=1000, warmup_steps=100))
    sampler = lib.BatchSampler(torch.randint(0, 65, (20_000,)), batch, ctx, seed=0)
    lib.fast_path(model, fast, fast).__enter__()  # for the rest of the run
    return lambda: step(sampler(), 1e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision", help="the revision to compare with, e.g. main or f5a8e47")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per model (default 20)")
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one timed run (default 0.5 s)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        old = library_at(args.revision, Path(tmp))
        print(f"this checkout ({tl.__file__}) against {args.revision}; torch {torch.__version__}, 1 thread, "
              f"{os.cpu_count()} cores; load average before: {', '.join(f'{x:.2f}' for x in load_before)}")
        print("| model | path | before (ms/step) | after (ms/step) | after / before (median; middle 80% of rounds) |")
        print("|---|---|---:|---:|---|")
        for label, sizes in MODELS.items():
            for fast in (True, False):
                fns = {"before": step_of(old, *sizes, fast), "after": step_of(tl, *sizes, fast)}
                runs = tl.speed.time_interleaved(fns, warmup=3, repeats=args.rounds, min_run_seconds=args.seconds)
                ratios = sorted(a / b for a, b in zip(runs["after"], runs["before"]))
                lo, hi = ratios[len(ratios) // 10], ratios[-1 - len(ratios) // 10]
                before, after = (1e3 * statistics.median(runs[k]) for k in ("before", "after"))
                path = "fast (tl.train's default)" if fast else "written out"
                print(f"| {label} | {path} | {before:.2f} | {after:.2f} | "
                      f"{statistics.median(ratios):.3f} ({lo:.3f}-{hi:.3f}) |", flush=True)
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
