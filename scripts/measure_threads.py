"""How many CPU threads should the chapters use? Measures it, quiet and under load.

For the training steps of the book's CPU configurations (chapter 2's tiny GPT, chapter 3's
lookup FFN, chapter 7's character GPT, chapter 10's LLaMA-style decoder), times steps with 1 and
with 2 PyTorch threads, on a quiet machine and with two other processes keeping every core
busy (as when the machine runs something else), in one run. Prints a Markdown table: wall and
CPU milliseconds per step. CONTRIBUTING.md's thread rule quotes it.

    .venv/bin/python scripts/measure_threads.py            # about 2 minutes
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time

import torch
import torch.nn.functional as F

import transformer_lib as tl


def _spin(stop) -> None:  # a process that keeps one core busy
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def gpt_step(layers: int, heads: int, d_model: int, ctx: int, batch: int, **extra):
    """A ``tl.TrainStep`` (the step ``tl.train`` takes) of a character model, on random ids."""
    torch.manual_seed(0)
    config = tl.GPT2Config(vocab_size=65, n_ctx=ctx, d_model=d_model, n_layers=layers, n_heads=heads,
                           use_sdpa=True, **extra)
    model = tl.GPT2(config).train()
    step = tl.TrainStep(model, tl.TrainConfig(device="cpu", progress=False))
    data = torch.randint(0, 65, (10_000,))
    sampler = tl.BatchSampler(data, batch, ctx)
    tl.fast_path(model).__enter__()  # the fused kernels tl.train uses, for the rest of the run
    return lambda: step(sampler(), 1e-3)


def ffn_step():
    """Chapter 3's fact lookup: a (64, 16) -> 64 -> 16 feed-forward network and Adam."""
    g = torch.Generator().manual_seed(0)
    E, answers = torch.randn(64, 16, generator=g), torch.randperm(64, generator=g)
    model = tl.FeedForward(16, 64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def step():
        loss = F.cross_entropy(model(E) @ E.T, answers)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


CASES = {
    "ch02 GPT (2 x 64, ctx 64, batch 32)": lambda: gpt_step(2, 4, 64, 64, 32),
    "ch03 FFN lookup (16 -> 64)": ffn_step,
    "ch07 GPT (2 x 128, ctx 64, batch 32)": lambda: gpt_step(2, 4, 128, 64, 32),
    "ch10 LLaMA-style (2 x 96, ctx 64, batch 32)": lambda: gpt_step(
        2, 4, 96, 64, 32, norm="rmsnorm", positional="rope", ffn="swiglu", bias=False, tie_weights=False),
}


def time_steps(step, seconds: float = 2.0) -> tuple[float, float]:
    """Median wall and CPU milliseconds per step over about ``seconds`` (after warm-up)."""
    for _ in range(3):
        step()
    walls, cpus = [], []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(walls) < 5:
        w, c = time.perf_counter(), time.process_time()
        step()
        walls.append(1e3 * (time.perf_counter() - w))
        cpus.append(1e3 * (time.process_time() - c))
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    rows = {}
    for load in ("quiet", "loaded"):
        stop, spinners = mp.Event(), []
        if load == "loaded":
            spinners = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(os.cpu_count() or 2)]
            for p in spinners:
                p.start()
            time.sleep(0.5)
        try:
            for name, make in CASES.items():
                step = make()
                for threads in (1, 2):
                    torch.set_num_threads(threads)
                    rows[name, threads, load] = time_steps(step)
        finally:
            stop.set()
            for p in spinners:
                p.join()
    print(f"{os.cpu_count()} cores, torch {torch.__version__}; loaded: {os.cpu_count()} other busy processes\n")
    print("| step | threads | quiet: wall ms | quiet: CPU ms | loaded: wall ms | loaded: CPU ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in CASES:
        for threads in (1, 2):
            (qw, qc), (lw, lc) = rows[name, threads, "quiet"], rows[name, threads, "loaded"]
            print(f"| {name} | {threads} | {qw:.2f} | {qc:.2f} | {lw:.2f} | {lc:.2f} |")


if __name__ == "__main__":
    main()
