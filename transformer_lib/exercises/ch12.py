"""Checks for chapter 12's exercises: averaging gradients by hand, the ring's bytes, ZeRO's memory."""

from __future__ import annotations

import inspect
import math
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Callable

import torch

from ..scaling import memory_per_gpu, ring_bytes_sent
from ._checking import NOT_IMPLEMENTED, ExerciseFailed, Verdict, attempt, call, correct, fail, pending


def _number(name: str, got) -> float:
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        fail(f"{name} should return a number, but it returned {type(got).__name__}.")
    return float(got)


def _diagnose(name: str, got: float, expected: float, mistakes: dict[str, float], what: str) -> None:
    for hint, wrong in mistakes.items():
        if math.isclose(got, wrong, rel_tol=1e-6):
            fail(f"{name} is not right yet. {hint}")
    fail(f"{name} gives the wrong {what}: expected {expected:,.6g}, got {got:,.6g}. Check the formula against the text.")


# -------------------------------------------------------------------- (a) averaging gradients by hand

HARNESS = '''
import os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

{source}

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


g = torch.Generator().manual_seed(1)
x, y = torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)  # the global batch
mine = slice(rank * 8 // world, (rank + 1) * 8 // world)               # this rank's share


def loss(model):
    return ((model(x[mine]) - y[mine]) ** 2).mean()


reader = make()
loss(reader).backward()
local = {{n: p.grad.clone() for n, p in reader.named_parameters()}}
error = None
try:
    {name}(reader)
except Exception as e:  # reported by the check
    error = f"{{type(e).__name__}}: {{e}}"
got = {{n: (p.grad.clone() if p.grad is not None else None) for n, p in reader.named_parameters()}}
reference = DDP(make())
loss(reference).backward()
ddp = {{n: p.grad.clone() for n, p in reference.module.named_parameters()}}
torch.save({{"local": local, "got": got, "ddp": ddp, "error": error}}, os.path.join(sys.argv[1], f"{{rank}}.pt"))
dist.barrier()
'''


def _close(a: dict, b: dict) -> bool:
    return all(a[k] is not None and torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-7) for k in b)


def _scaled(grads: dict, factor: float) -> dict:
    return {k: v * factor for k, v in grads.items()}


def check_average_gradients(fn: Callable, world_size: int = 2) -> Verdict:
    """Check ``fn(model)``: after each process's backward pass on its share of the batch, it must leave in
    every ``p.grad`` the mean of the processes' gradients (``dist.all_reduce``, then divide by the world
    size), which is what ``DistributedDataParallel`` computes.

    The check starts ``world_size`` CPU processes (gloo) with ``torch.distributed.run``: each builds the
    same small model, runs a backward pass on its share of one batch, calls ``fn``, and compares
    ``p.grad`` with DDP's on the same share. Names the mistakes: no all-reduce (or one on a copy), the
    sum without the division, divided twice, the average on one rank only (``dist.reduce``), gloo's
    missing ``ReduceOp.AVG``, and names from the notebook that the new processes do not have.
    Returns a false ``Verdict`` while ``fn`` raises NotImplementedError.
    """
    name = "average_gradients"
    probe = torch.nn.Linear(2, 2)
    probe(torch.ones(1, 2)).sum().backward()
    try:  # in this process there is no process group: only "not written yet" is learnt here
        if attempt(fn, probe) is NOT_IMPLEMENTED:
            return pending(name)
    except Exception:
        pass
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        fail(f"{name}: its source code cannot be read (inspect.getsource), and the check runs it in new "
             "processes. Define it with def in a notebook cell or a file.")
    with tempfile.TemporaryDirectory(prefix="tfs-ch12-") as folder:
        script = Path(folder) / "check.py"
        script.write_text(HARNESS.format(source=source, name=fn.__name__))
        library = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [library, os.environ.get("PYTHONPATH")])))
        run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                              f"--nproc_per_node={world_size}", str(script), folder], env=env, capture_output=True,
                             text=True, timeout=300)
        results = [Path(folder) / f"{r}.pt" for r in range(world_size)]
        if run.returncode != 0 or not all(r.exists() for r in results):
            last = [line for line in (run.stdout + run.stderr).splitlines() if "Error" in line]
            missing = next((line for line in last if "NameError" in line), None)
            if missing:
                fail(f"{name} uses a name that the check's new processes do not have ({missing.split(': ', 1)[-1]}). "
                     "They know torch and torch.distributed as dist; import anything else inside the function.")
            fail(f"{name} could not be checked: its processes failed.\n" + "\n".join(last[-3:]))
        ranks = [torch.load(r, weights_only=True) for r in results]
    return diagnose_average(name, ranks, world_size)


def diagnose_average(name: str, ranks: list[dict], world_size: int) -> Verdict:
    """The verdict on every rank's ``{"local", "got", "ddp", "error"}``: its own gradient before ``fn``,
    after ``fn``, DDP's, and what ``fn`` raised."""
    errors = [r["error"] for r in ranks if r["error"]]
    if errors:
        hint = (" gloo, the CPU backend, has no ReduceOp.AVG: all-reduce with the default ReduceOp.SUM and "
                "divide by dist.get_world_size()." if any("AVG" in e for e in errors) else "")
        fail(f"{name} raised {errors[0]}.{hint}")
    if all(_close(r["got"], r["ddp"]) for r in ranks):
        return correct(f"every p.grad holds the mean of the {world_size} processes' gradients, as DDP's "
                       "all-reduce leaves it; DDP does the same in buckets of about 25 MB while the backward "
                       "pass runs.")
    if all(_close(r["got"], r["local"]) for r in ranks):
        fail(f"{name} left each process with its own gradient. Call dist.all_reduce(p.grad) for every "
             "parameter: it works in place, on the tensor you pass (an all-reduce of a copy leaves p.grad "
             "as it was).")
    if all(_close(r["got"], _scaled(r["ddp"], world_size)) for r in ranks):
        fail(f"{name} leaves the sum of the gradients: dist.all_reduce adds them up. Divide by "
             "dist.get_world_size() to get the mean, the gradient of the whole batch's mean loss.")
    if all(_close(r["got"], _scaled(r["ddp"], 1 / world_size)) for r in ranks):
        fail(f"{name} divides by the world size twice.")
    if _close(ranks[0]["got"], ranks[0]["ddp"]) or _close(ranks[0]["got"], _scaled(ranks[0]["ddp"], world_size)):
        fail(f"{name}: only rank 0 got the result (dist.reduce sends it to one rank), but every rank takes "
             "the same step, so every rank needs the mean: use dist.all_reduce.")
    fail(f"{name} leaves gradients that are neither each process's own nor their mean. Sum with "
         "dist.all_reduce(p.grad) and divide by dist.get_world_size().")


# -------------------------------------------------------------------------- (b) the ring's bytes

RING_CASES = ((1_000_003, 4), (4 * 124_439_808, 8), (2**20, 1), (997, 3))


def ring_mistakes(n_bytes: float, world_size: int) -> dict[str, float]:
    n = world_size
    return {
        "That is the reduce-scatter alone, (N - 1) / N of the bytes: the all-gather sends as much again to "
        "hand the summed chunks round.": (n - 1) / n * n_bytes,
        "You sent the whole vector at every step: each step sends one chunk, 1/N of it.": 2 * (n - 1) * n_bytes,
        "That is what each worker would send if it sent its vector to every other one, (N - 1) x the bytes: "
        "the ring's point is that it sends less.": (n - 1) * n_bytes,
        "2 x the bytes is the limit for many workers; with N workers each sends 2 (N - 1) / N of it.": 2 * n_bytes,
        "You counted one step's chunk only: there are 2 (N - 1) steps.": n_bytes / n,
    }


def check_ring_bytes(fn: Callable[[float, int], float]) -> Verdict:
    """Check ``fn(n_bytes, world_size)``: the bytes each worker sends in a ring all-reduce of ``n_bytes``,
    ``2 (N - 1) / N * n_bytes`` (0 for one worker). Names the mistakes: the reduce-scatter only, the whole
    vector at every step, sending to every worker, the large-N limit, one chunk."""
    name = "ring_bytes"
    for n_bytes, world in RING_CASES:
        got = call(name, fn, n_bytes, world)
        if got is NOT_IMPLEMENTED:
            return pending(name)
        got = _number(name, got)
        expected = ring_bytes_sent(n_bytes, world)
        if not math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9):
            _diagnose(name, got, expected, ring_mistakes(n_bytes, world), "number of bytes")
    n = 8
    return correct(f"2 (N - 1) / N x the bytes: {ring_bytes_sent(1, 2):.2f}x for 2 GPUs, {ring_bytes_sent(1, n):.2f}x "
                   f"for {n}, never 2x: each link carries the same, however many GPUs share the ring.")


# ---------------------------------------------------------------------- (c) ZeRO's memory per GPU

ZERO_CASES = ((1_000_003, 4, 0), (1_000_003, 4, 1), (1_000_003, 4, 2), (1_000_003, 4, 3),
              (6_738_415_616, 8, 1), (124_439_808, 64, 3))
STAGE_NAMES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP")


def zero_mistakes(n_params: int, world_size: int, stage: int) -> dict[str, float]:
    p, n = n_params, world_size

    def held(weights, grads, optimizer, shard_from):  # shard the last (4 - shard_from) kinds of state
        parts = [optimizer, grads, weights]  # stage k shards the first k of these
        return sum(b * p / (n if i < shard_from else 1) for i, b in enumerate(parts))

    return {
        "You counted fp32 training (4 + 4 + 8 bytes per parameter): this exercise counts bf16 mixed precision, "
        "bf16 weights and gradients (2 + 2) and fp32 master weights and moments (12).": held(4, 4, 8, stage),
        "You forgot the fp32 master copy of the weights (4 bytes per parameter): with bf16 weights the "
        "optimizer keeps one, beside the two moments.": held(2, 2, 8, stage),
        "Every stage shards one more kind of state: stage 1 the optimizer state only, stage 2 the gradients "
        "too, stage 3 the weights too. Yours shards one kind too many.": held(2, 2, 12, min(stage + 1, 3)),
        "Every stage shards one more kind of state: stage 1 the optimizer state only, stage 2 the gradients "
        "too, stage 3 the weights too. Yours shards one kind too few.": held(2, 2, 12, max(stage - 1, 0)),
        "You divided everything by the number of GPUs: only the sharded kinds of state are divided.":
            16 * p / n,
    }


def check_zero_bytes(fn: Callable[[int, int, int], float]) -> Verdict:
    """Check ``fn(n_params, world_size, stage)``: bytes per GPU for weights, gradients and AdamW state in bf16
    mixed precision (2 + 2 + 12 bytes per parameter), with ZeRO stage 0 (DDP) to 3 (FSDP) sharding the
    optimizer state, then the gradients, then the weights, over ``world_size`` GPUs. Activations are not
    counted. Names the mistakes: fp32's accounting, no master weights, a stage off by one, all divided."""
    name = "zero_bytes"
    for n_params, world, stage in ZERO_CASES:
        got = call(name, fn, n_params, world, stage)
        if got is NOT_IMPLEMENTED:
            return pending(name)
        got = _number(name, got)
        parts = memory_per_gpu(n_params, world, STAGE_NAMES[stage], "bf16")
        expected = parts["weights"] + parts["gradients"] + parts["optimizer state"]
        if not math.isclose(got, expected, rel_tol=1e-9):
            _diagnose(name, got, expected, zero_mistakes(n_params, world, stage), "bytes")
    seven_b = 6_738_415_616
    ddp, fsdp = (sum(memory_per_gpu(seven_b, 8, s, "bf16").values()) / 2**30 for s in ("DDP", "ZeRO-3 / FSDP"))
    return correct(f"For a 7B LLaMA on 8 GPUs: {ddp:,.0f} GiB per GPU with DDP (more than any GPU has), "
                   f"{fsdp:,.1f} GiB with ZeRO-3 / FSDP, before activations.")


__all__ = ["ExerciseFailed", "check_average_gradients", "check_ring_bytes", "check_zero_bytes"]
