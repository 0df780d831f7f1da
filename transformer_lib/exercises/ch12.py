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


def _same(got: float, expected: float) -> bool:
    """Equal, or within a byte of a byte count: an answer rounded or truncated to whole bytes is right
    (a small number, such as a ratio, has to be exact)."""
    return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1.0 if abs(expected) >= 100 else 1e-9)


def _digits(x: float) -> str:
    """Every digit of a byte count (never 1.5e+06 against 1.5e+06)."""
    return f"{x:,.0f}" if x == int(x) else f"{x:,.3f}".rstrip("0")


def _check_cases(name: str, fn: Callable, cases: tuple, expected: Callable, mistakes: Callable, what: str):
    """Run ``fn`` on every case; ``None`` when every answer is right, a pending Verdict for a stub. A wrong
    answer names the mistake whose formula gives the reader's answer on *every* case (one case alone
    can match two mistakes), else shows the first case that differs, in full digits."""
    answers = []
    for case in cases:
        got = call(name, fn, *case)
        if got is NOT_IMPLEMENTED:
            return pending(name)
        answers.append(_number(name, got))
    wrong = [(case, got) for case, got in zip(cases, answers) if not _same(got, expected(*case))]
    if not wrong:
        return None
    for hint in mistakes(*cases[0]):
        if all(_same(got, mistakes(*case)[hint]) for case, got in zip(cases, answers)):
            fail(f"{name} is not right yet. {hint}")
    case, got = wrong[0]
    fail(f"{name}{case} gives the wrong {what}: expected {_digits(expected(*case))}, got {_digits(got)}. "
         "Check the formula against the text.")


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
x, y = torch.randn(12, 6, generator=g), torch.randn(12, 3, generator=g)  # the global batch
mine = slice(rank * 12 // world, (rank + 1) * 12 // world)               # this rank's share


def loss(model):
    return ((model(x[mine]) - y[mine]) ** 2).mean()


reader = make()
loss(reader).backward()
local = {{n: p.grad.clone() for n, p in reader.named_parameters()}}
calls = []  # what each dist.all_reduce was given: a gradient, a weight, or another tensor (a copy)


def kind(t):
    where = t.untyped_storage().data_ptr()
    params = list(reader.parameters())
    if any(p.grad is not None and p.grad.untyped_storage().data_ptr() == where for p in params):
        return "grad"
    return "weight" if any(p.untyped_storage().data_ptr() == where for p in params) else "copy"


all_reduce = dist.all_reduce


def recorded(tensor, *args, **kwargs):
    calls.append(kind(tensor) + (" async" if kwargs.get("async_op") else ""))
    return all_reduce(tensor, *args, **kwargs)


dist.all_reduce = recorded
error = None
try:
    {name}(reader)
except Exception as e:  # reported by the check
    error = f"{{type(e).__name__}}: {{e}}"
finally:
    dist.all_reduce = all_reduce
got = {{n: (p.grad.clone() if p.grad is not None else None) for n, p in reader.named_parameters()}}
reference = DDP(make())
loss(reference).backward()
ddp = {{n: p.grad.clone() for n, p in reference.module.named_parameters()}}
torch.save({{"local": local, "got": got, "ddp": ddp, "error": error, "calls": calls}},
           os.path.join(sys.argv[1], f"{{rank}}.pt"))
dist.barrier()
'''


def _close(a: dict, b: dict) -> bool:
    return all(a[k] is not None and torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-7) for k in b)


def _scaled(grads: dict, factor: float) -> dict:
    return {k: v * factor for k, v in grads.items()}


NEW_PROCESSES = ("They know torch and torch.distributed as dist, and nothing else from the notebook: take "
                 "the number of processes from dist.get_world_size(), and import anything else inside the "
                 "function.")


def check_average_gradients(fn: Callable, world_size: int = 3) -> Verdict:
    """Check ``fn(model)``: after each process's backward pass on its share of the batch, it must leave in
    every ``p.grad`` the mean of the processes' gradients (``dist.all_reduce``, then divide by the world
    size), which is what ``DistributedDataParallel`` computes.

    The check starts ``world_size`` CPU processes (gloo) with ``torch.distributed.run`` (three: a division by
    2 written in would pass with two): each builds the same small model, runs a backward pass on its share of
    one batch, calls ``fn``, and compares ``p.grad`` with DDP's on the same share. Names the mistakes: no
    all-reduce, one on a copy, one of the weights instead of the gradients, the sum without the division,
    divided twice or by a fixed number, the average on one rank only (``dist.reduce``), gloo's missing
    ``ReduceOp.AVG``, and names from the notebook that the new processes do not have. Returns a false
    ``Verdict`` while ``fn`` raises NotImplementedError.
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
                fail(f"{name} uses a name that the check's new processes do not have "
                     f"({missing.split(': ', 1)[-1]}). {NEW_PROCESSES}")
            fail(f"{name} could not be checked: its processes failed.\n" + "\n".join(last[-3:]))
        ranks = [torch.load(r, weights_only=True) for r in results]
    return diagnose_average(name, ranks, world_size)


def _factor(got: dict, reference: dict) -> float | None:
    """The one number ``f`` with ``got == f * reference`` for every tensor, or None."""
    k = max(reference, key=lambda k: reference[k].abs().max().item())
    f = (got[k].flatten() @ reference[k].flatten() / (reference[k].flatten() @ reference[k].flatten())).item()
    return f if _close(got, _scaled(reference, f)) else None


def diagnose_average(name: str, ranks: list[dict], world_size: int) -> Verdict:
    """The verdict on every rank's ``{"local", "got", "ddp", "error", "calls"}``: its own gradient before
    ``fn``, after ``fn``, DDP's, what ``fn`` raised, and what each of its all-reduces was given."""
    errors = [r["error"] for r in ranks if r["error"]]
    if errors:
        hint = ""
        if any("AVG" in e for e in errors):
            hint = (" gloo, the CPU backend, has no ReduceOp.AVG: all-reduce with the default ReduceOp.SUM and "
                    "divide by dist.get_world_size().")
        elif any(e.startswith("NameError") for e in errors):
            hint = f" The check runs it in {world_size} new processes. {NEW_PROCESSES}"
        fail(f"{name} raised {errors[0]}.{hint}")
    if all(r["got"][k] is None for r in ranks for k in r["ddp"]):
        fail(f"{name} left no gradients: p.grad is None afterwards. Change p.grad in place "
             "(dist.all_reduce(p.grad), then p.grad /= ...), and don't set it to None.")
    if all(_close(r["got"], r["ddp"]) for r in ranks):
        return correct(f"every p.grad holds the mean of the {world_size} processes' gradients, as DDP's "
                       "all-reduce leaves it; DDP does the same in buckets (the first of 1 MB, then about "
                       "25 MB) while the backward pass runs.")
    calls = {c.split()[0] for r in ranks for c in r.get("calls", [])}
    waited = not any(c.endswith(" async") for r in ranks for c in r.get("calls", []))
    if all(_close(r["got"], r["local"]) for r in ranks):
        if calls == {"weight"}:
            fail(f"{name} all-reduced the weights (p or p.data), not the gradients: every process starts from "
                 "the same weights, so their mean changes nothing, and each p.grad is still the process's own. "
                 "Call dist.all_reduce(p.grad) and divide p.grad by dist.get_world_size().")
        if "copy" in calls:
            fail(f"{name} all-reduced a copy of each gradient (a tensor made from p.grad, such as "
                 "p.grad.clone() or p.grad / n), which leaves p.grad as it was. dist.all_reduce works in place, "
                 "on the tensor you pass: pass p.grad itself, then divide it in place (p.grad /= ...).")
        fail(f"{name} left each process with its own gradient. Call dist.all_reduce(p.grad) for every "
             "parameter: it works in place, on the tensor you pass.")
    factors = [_factor(r["got"], r["ddp"]) for r in ranks]
    if None not in factors and max(factors) - min(factors) < 1e-6 * max(map(abs, factors)):
        f = factors[0]
        if math.isclose(f, world_size, rel_tol=1e-5):
            fail(f"{name} leaves the sum of the gradients: dist.all_reduce adds them up. Divide by "
                 "dist.get_world_size() to get the mean, the gradient of the whole batch's mean loss.")
        if math.isclose(f, 1 / world_size, rel_tol=1e-5):
            fail(f"{name} divides by the world size twice.")
        divisor = world_size / f
        if abs(divisor - round(divisor)) < 1e-4 and round(divisor) > 0:
            fail(f"{name} divides the sum by {round(divisor)}, but the check runs {world_size} processes: divide by "
                 "dist.get_world_size(), which is right for any number of processes.")
    if not waited:
        fail(f"{name} started its all-reduces with async_op=True and used p.grad before they had finished: "
             "call .wait() on the work each returns before dividing (or leave async_op out).")
    first = ranks[0]
    if _close(first["got"], first["ddp"]) or _close(first["got"], _scaled(first["ddp"], world_size)):
        fail(f"{name}: only rank 0 got the result (dist.reduce sends it to one rank), but every rank takes "
             "the same step, so every rank needs the mean: use dist.all_reduce.")
    fail(f"{name} leaves gradients that are neither each process's own nor their mean. Sum with "
         "dist.all_reduce(p.grad) and divide by dist.get_world_size().")


# -------------------------------------------------------------------------- (b) the ring's bytes

RING_CASES = ((1_000_003, 5), (4 * 124_439_808, 8), (2**20, 1), (997, 3), (1_000_000, 2))


def ring_mistakes(n_bytes: float, world_size: int) -> dict[str, float]:
    n = world_size
    return {
        "That is the reduce-scatter alone, (N - 1) / N of the bytes: the all-gather sends as much again to "
        "hand the summed chunks round.": (n - 1) / n * n_bytes,
        "You counted what each worker sends and what it receives, 4 (N - 1) / N x the bytes: count the "
        "sends only (each byte sent is received by the neighbour, on the other direction of the link).":
            4 * (n - 1) / n * n_bytes,
        "You sent the whole vector at every step: each step sends one chunk, 1/N of it.": 2 * (n - 1) * n_bytes,
        "That is what each worker would send if it sent its vector to every other one, (N - 1) x the bytes: "
        "the ring's point is that it sends less.": (n - 1) * n_bytes,
        "2 x the bytes is the limit for many workers; with N workers each sends 2 (N - 1) / N of it.": 2 * n_bytes,
        "You counted one step's chunk only: there are 2 (N - 1) steps.": n_bytes / n,
        "That is the factor 2 (N - 1) / N alone: multiply by n_bytes.": 2 * (n - 1) / n,
        "That is in bits: the exercise counts bytes.": 8 * 2 * (n - 1) / n * n_bytes,
    }


def check_ring_bytes(fn: Callable[[float, int], float]) -> Verdict:
    """Check ``fn(n_bytes, world_size)``: the bytes each worker sends in a ring all-reduce of ``n_bytes``,
    ``2 (N - 1) / N * n_bytes`` (0 for one worker; a whole number of bytes, rounded or not, is right). Names
    the mistakes: the reduce-scatter only, sends and receives counted, the whole vector at every step,
    sending to every worker, the large-N limit, one chunk, the factor alone, bits."""
    name = "ring_bytes"
    verdict = _check_cases(name, fn, RING_CASES, ring_bytes_sent, ring_mistakes, "number of bytes")
    if verdict is not None:
        return verdict
    n = 8
    return correct(f"2 (N - 1) / N x the bytes: {ring_bytes_sent(1, 2):.2f}x for 2 GPUs, {ring_bytes_sent(1, n):.2f}x "
                   f"for {n}, never 2x: each link carries the same, however many GPUs share the ring.")


# ---------------------------------------------------------------------- (c) ZeRO's memory per GPU

ZERO_CASES = ((1_000_003, 4, 1), (1_000_003, 4, 2), (1_000_003, 4, 3), (1_000_003, 4, 0),
              (6_738_415_616, 8, 1), (124_439_808, 64, 3), (1_000_003, 1, 3))
STAGE_NAMES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP")


def zero_bytes_of(n_params: int, world_size: int, stage: int) -> float:
    """The right answer: weights, gradients and optimizer state of :func:`memory_per_gpu` in bf16."""
    parts = memory_per_gpu(n_params, world_size, STAGE_NAMES[stage], "bf16")
    return parts["weights"] + parts["gradients"] + parts["optimizer state"]


def zero_mistakes(n_params: int, world_size: int, stage: int) -> dict[str, float]:
    p, n = n_params, world_size

    def held(weights, grads, optimizer, sharded):  # sharded: which of (optimizer, gradients, weights) are
        parts = [optimizer, grads, weights]
        return sum(b * p / (n if sharded(i) else 1) for i, b in enumerate(parts))

    def up_to(k):  # stage k shards the first k kinds: cumulative
        return lambda i: i < k

    return {
        "Stages are cumulative: stage 2 shards the gradients *and* the optimizer state, stage 3 the weights "
        "as well. Yours shards only the kind that the stage adds.": held(2, 2, 12, lambda i: i == stage - 1),
        "You counted fp32 training (4 + 4 + 8 bytes per parameter): this exercise counts bf16 mixed precision, "
        "bf16 weights and gradients (2 + 2) and fp32 master weights and moments (12).": held(4, 4, 8, up_to(stage)),
        "You forgot the fp32 master copy of the weights (4 bytes per parameter): with bf16 weights the "
        "optimizer keeps one, beside the two moments.": held(2, 2, 8, up_to(stage)),
        "You counted the fp32 master copy with the weights (2 + 4 = 6 bytes): it is optimizer state, updated "
        "only by the optimizer, so ZeRO counts it there (12 bytes with the two moments) and stage 1 shards "
        "it.": held(6, 2, 8, up_to(stage)),
        "You counted fp32 gradients (4 bytes): here the gradients are bf16, like the weights they are "
        "computed with (2 bytes).": held(2, 4, 12, up_to(stage)),
        "Every stage shards one more kind of state: stage 1 the optimizer state only, stage 2 the gradients "
        "too, stage 3 the weights too. Yours shards one kind too many.": held(2, 2, 12, up_to(min(stage + 1, 3))),
        "Every stage shards one more kind of state: stage 1 the optimizer state only, stage 2 the gradients "
        "too, stage 3 the weights too. Yours shards one kind too few.": held(2, 2, 12, up_to(max(stage - 1, 0))),
        "You divided everything by the number of GPUs: only the sharded kinds of state are divided.":
            16 * p / n,
        "That is in GiB (2**30 bytes): return bytes.": zero_bytes_of(p, n, stage) / 2**30,
        "That is in GB (10**9 bytes): return bytes.": zero_bytes_of(p, n, stage) / 1e9,
    }


def check_zero_bytes(fn: Callable[[int, int, int], float]) -> Verdict:
    """Check ``fn(n_params, world_size, stage)``: bytes per GPU for weights, gradients and AdamW state in bf16
    mixed precision (2 + 2 + 12 bytes per parameter), with ZeRO stage 0 (DDP) to 3 (FSDP) sharding the
    optimizer state, then the gradients, then the weights, over ``world_size`` GPUs (a whole number of bytes,
    rounded or not, is right). Activations are not counted. Names the mistakes: stages that are not
    cumulative, fp32's accounting, no master weights, the master weights counted with the weights, fp32
    gradients, a stage off by one, all divided, GiB or GB."""
    name = "zero_bytes"
    verdict = _check_cases(name, fn, ZERO_CASES, zero_bytes_of, zero_mistakes, "bytes")
    if verdict is not None:
        return verdict
    seven_b = 6_738_415_616
    ddp, fsdp = (sum(memory_per_gpu(seven_b, 8, s, "bf16").values()) / 2**30 for s in ("DDP", "ZeRO-3 / FSDP"))
    return correct(f"For a 7B LLaMA on 8 GPUs: {ddp:,.0f} GiB per GPU with DDP (more than an 80 GB GPU holds), "
                   f"{fsdp:,.1f} GiB with ZeRO-3 / FSDP, before activations.")


__all__ = ["ExerciseFailed", "check_average_gradients", "check_ring_bytes", "check_zero_bytes"]
