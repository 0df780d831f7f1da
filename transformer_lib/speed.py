"""Measuring speed: timing a step, where its time goes, its peak memory, FLOPs and MFU.

Taught in chapter 11, *Making it fast* (``book/11_making_it_fast.ipynb``); used by
``python -m benchmarks``.

A training step does ``6 N`` floating-point operations per token in its matrix products (2 for
each multiply-add, forward; twice that backward) plus ``12 L H d_head T`` in attention, with ``L``
layers of ``H`` heads of width ``d_head`` over ``T`` positions (Chowdhery et al., 2022, appendix B,
who write it ``6N + 12LHQT`` with ``Q`` the head width). Like PaLM, this counts the full ``T x T``
products ``Q K^T`` and ``weights @ V``; a causal kernel computes only about half of them, so
``6 L H d_head T`` is a valid count of its work, but MFU figures quoted after PaLM use the full one.

*Model FLOPs utilisation* (MFU), as PaLM defines it: the observed throughput times the model FLOPs
per token, divided by the hardware's theoretical peak FLOP/s (a data sheet's figure, :data:`PEAK_FLOPS`):
``tokens/s x FLOPs per token / peak FLOP/s``. A rate measured on the machine (a large matrix
product) is not that peak, and the ratio against it is not MFU.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from ._checks import check_bool, check_int, is_real
from .layers.attention import MultiHeadAttention
from .layers.embedding import TokenEmbedding
from .layers.feedforward import FeedForward, GatedFeedForward
from .layers.normalization import LayerNorm, RMSNorm
from .layers.positions import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from .params import count_parameters


def set_cpu_threads(device: str | torch.device | int | None = None) -> None:
    """The book's thread rule: on a CPU, one PyTorch thread; on a GPU, PyTorch's default.

    ``device``: where the chapter computes (None: a GPU if there is one), or a number of threads
    (``set_cpu_threads(2)``), which is set as it is. Every chapter calls it in its imports cell.
    Measured with ``scripts/measure_threads.py`` (CONTRIBUTING.md has the table): on a quiet 2-core machine a second thread makes chapter 7's
    training step 1.6x faster, but while other processes keep the cores busy the two threads
    wait for each other, 1.9x slower than one thread, at almost 3x the CPU time. One thread also
    gives the same numbers on any number of cores, and makes a chapter's CPU time its own work,
    which is what the chapters' time budgets measure.
    """
    if isinstance(device, int) and not isinstance(device, bool):  # the name says threads: a count
        check_int("threads", device, low=1)
        torch.set_num_threads(device)
        return
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a device ('cpu', 'cuda', a torch.device), a number of threads "
                        f"or None, got {type(device).__name__} {device!r}")
    try:
        on_cpu = torch.device(device).type == "cpu"
    except RuntimeError:
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N', 'mps', a number of threads or None, "
                         f"got {device!r}") from None
    if on_cpu:
        torch.set_num_threads(1)


@contextmanager
def fast_path(model: nn.Module, attention: bool = True, kernels: bool = True) -> Iterator[nn.Module]:
    """Run ``model`` on PyTorch's fused kernels; ``fast_path(model, False, False)``: all written out.

    ``attention``: every :class:`MultiHeadAttention` uses ``F.scaled_dot_product_attention``
    (``use_sdpa``), which never forms the attention weights; self-attention computes
    Q, K and V in one matrix product (nanoGPT's ``c_attn``). ``kernels``: FFN
    activations and norms use one-kernel ``F.gelu``, ``F.silu``, ``F.layer_norm``,
    ``F.rms_norm`` instead of the formulas the chapters write out, each of whose steps
    reads and writes the whole tensor.
    The results are the same to float precision (tested). :func:`~transformer_lib.capture_attention`
    still sees the weights inside. Each module's own setting comes back on exit::

        with tl.fast_path(model):    # what tl.train does with TrainConfig(fast_path=True)
            model.loss(x, y).backward()
    """
    check_bool("attention", attention)
    check_bool("kernels", kernels)
    switches = [(m, "use_sdpa", attention) for m in model.modules() if isinstance(m, MultiHeadAttention)]
    fusable = (FeedForward, GatedFeedForward, LayerNorm, RMSNorm)
    switches += [(m, "fused", kernels) for m in model.modules() if isinstance(m, fusable)]
    previous = [getattr(m, name) for m, name, _ in switches]
    for m, name, value in switches:
        setattr(m, name, value)
    try:
        yield model
    finally:
        for (m, name, _), old in zip(switches, previous):
            setattr(m, name, old)


# Dense (no sparsity) bf16 tensor-core peak in FLOP/s, from the vendors' data sheets; fp16 for the
# T4 and V100, which have no bf16. Matched in this order against torch.cuda.get_device_name().
PEAK_FLOPS: dict[str, float] = {
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H100": 989e12,  # SXM
    "H200": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L40": 181e12,  # before "L4", which its name contains
    "L4": 121e12,
    "V100": 125e12,
    "T4": 65e12,
}


def peak_flops(device_name: str) -> float | None:
    """The dense bf16/fp16 peak of a GPU from its name (``torch.cuda.get_device_name()``), or None if unknown."""
    for key, flops in PEAK_FLOPS.items():
        if key.lower() in device_name.lower():
            return flops
    return None


def flops_per_token(n_params: int, n_layers: int, n_heads: int, d_head: int, seq_len: int) -> int:
    """Training FLOPs per token, forward and backward, as PaLM counts them: ``6 N + 12 L H d_head T``.

    ``N`` parameters in matrix products, each doing a multiply and an add per token forward (2N)
    and twice that backward (4N); attention's ``Q K^T`` and ``weights @ V`` add ``2 x 2 T d_head``
    per head and layer forward, times 3 with the backward pass. That is the full ``T x T``
    product (Chowdhery et al., 2022, appendix B); a causal kernel skips the masked half, about
    ``6 L H d_head T``.
    """
    sizes = {"n_params": n_params, "n_layers": n_layers, "n_heads": n_heads, "d_head": d_head,
             "seq_len": seq_len}
    for name, value in sizes.items():
        check_int(name, value, low=0)
    return 6 * n_params + 12 * n_layers * n_heads * d_head * seq_len


def matmul_parameters(model: nn.Module) -> int:
    """Parameters that multiply activations: all but lookup tables (position embeddings, an
    untied token embedding).

    A token embedding tied to the output head counts once: as the head, it is a matrix product.
    """
    linear_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    lookups = tuple(
        m for m in model.modules()
        if isinstance(m, (TokenEmbedding, LearnedPositionalEmbedding, nn.Embedding))
        and id(m.weight) not in linear_weights
    )
    return count_parameters(model, exclude=lookups)


def model_flops_per_token(model: nn.Module, seq_len: int | None = None) -> int:
    """:func:`flops_per_token` of a model with a ``config`` (GPT-2-like), at ``seq_len`` (default ``n_ctx``)."""
    config = model.config
    seq_len = config.n_ctx if seq_len is None else seq_len
    return flops_per_token(matmul_parameters(model), config.n_layers, config.n_heads, config.d_head, seq_len)


def mfu(tokens_per_second: float, flops_per_token: float, peak: float) -> float:
    """Model FLOPs utilisation: the fraction of ``peak`` FLOP/s that the model's useful work reaches.

    ``peak`` is the hardware's theoretical peak (PaLM's definition), e.g. :func:`peak_flops` of a GPU
    for the precision it trains in; against a measured rate the same ratio is something else.
    """
    for name, value in (("tokens_per_second", tokens_per_second), ("flops_per_token", flops_per_token), ("peak", peak)):
        if not is_real(value) or value < 0 or (name == "peak" and value == 0):
            raise ValueError(f"{name} must be a number {'> 0' if name == 'peak' else '>= 0'}, got {value!r}")
    return tokens_per_second * flops_per_token / peak


# ---------------------------------------------------------------------------------------- timing


def synchronize(device: torch.device | str | None) -> None:
    """Wait for the device to finish its queued work (GPU work is asynchronous: a timer alone would miss it)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def time_calls(
    fn: Callable[[], Any], *, warmup: int = 2, repeats: int = 5, number: int = 1,
    device: torch.device | str | None = None,
) -> list[float]:
    """Seconds per call of ``fn()``: ``warmup`` untimed calls, then ``repeats`` timings of
    ``number`` calls each.

    Take the median of the result: on a shared machine single timings jump when another program
    runs, and the median ignores the outliers. The first calls are slow (memory allocation, lazy
    initialisation, compilation): that is what the warm-up is for.
    """
    check_int("warmup", warmup, low=0)
    check_int("repeats", repeats, low=1)
    check_int("number", number, low=1)
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        synchronize(device)
        times.append((time.perf_counter() - start) / number)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def time_interleaved(
    fns: dict[Any, Callable[[], Any]],
    *,
    warmup: int = 2,
    repeats: int = 5,
    min_run_seconds: float = 0.3,
    slow_step_seconds: float = 2.0,
    slow_repeats: int = 3,
    device: torch.device | str | None = None,
) -> dict[Any, list[float]]:
    """Seconds per call of each of several ``fns``, timed in turn: ``{name: [seconds per call, ...]}``.

    To compare variants on a shared machine: warm each up, then time one run of each, round after
    round (``repeats`` rounds), so that a burst of load from another program hits every variant
    alike; compare their medians. A timed run repeats the call until it lasts about
    ``min_run_seconds``. If a call takes longer than ``slow_step_seconds``, every variant gets one
    warm-up call and ``slow_repeats`` rounds, so that slow models stay affordable.
    """
    check_int("repeats", repeats, low=1)
    check_int("warmup", warmup, low=0)
    numbers, slow = {}, False
    for name, fn in fns.items():
        first = time_calls(fn, warmup=min(warmup, 1), repeats=1, device=device)[0]
        slow = slow or first > slow_step_seconds
        if not slow and warmup > 1:
            first = time_calls(fn, warmup=warmup - 1, repeats=1, device=device)[0]
        numbers[name] = max(1, math.ceil(min_run_seconds / max(first, 1e-9)))
    runs: dict[Any, list[float]] = {name: [] for name in fns}
    for _ in range(min(repeats, slow_repeats) if slow else repeats):
        for name, fn in fns.items():
            runs[name] += time_calls(fn, warmup=0, repeats=1, number=numbers[name], device=device)
    return runs


# ------------------------------------------------------------------------------- where time goes

PARTS = ("attention", "softmax", "FFN", "norms", "embeddings", "output head", "loss", "optimizer", "other")
_MODULE_PARTS: tuple[tuple[type, str], ...] = (
    (MultiHeadAttention, "attention"),
    ((FeedForward, GatedFeedForward), "FFN"),
    ((LayerNorm, RMSNorm, nn.LayerNorm), "norms"),
    ((TokenEmbedding, LearnedPositionalEmbedding, SinusoidalPositionalEncoding, nn.Embedding), "embeddings"),
)
_TAG = "tfs::"
_BACKWARD = "autograd::engine::evaluate_function: "
_LOSS_OPS = ("cross_entropy", "nll_loss", "log_softmax")


def _part_of_module(name: str, module: nn.Module) -> str | None:
    if name.split(".")[-1] == "lm_head":
        return "output head"
    for cls, part in _MODULE_PARTS:
        if isinstance(module, cls):
            return part
    return None


def _quiet_profiler() -> None:
    """Kineto, the profiler's C++ side, logs a line at every start and stop unless told otherwise (read once, at its first use)."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")


def profile_step(
    step: Callable[[], Any], model: nn.Module, *, steps: int = 3, warmup: int = 1,
    device: torch.device | str | None = None,
) -> dict[str, float]:
    """Seconds per call of ``step()`` (a whole training step) spent in each part of ``model``.

    Runs ``step`` under ``torch.profiler``. Forward hooks mark each module's operations with its
    part (attention, FFN, norms, embeddings, output head); a backward operation belongs to the part
    whose forward operation created it (the profiler numbers both alike, ``sequence_nr``). Inside
    attention, the softmax is its own part (the fused kernel has none: it never forms the weights).
    Operations outside the model are the loss, the optimizer (``Optimizer.step``, ``zero_grad``)
    or "other" (gradient clipping, autograd's bookkeeping). Times are each operation's *self*
    time, on the CPU or, on a GPU, of its kernels; the profiler's own overhead inflates small
    operations, so compare the parts with each other, and take totals from :func:`time_calls`.

    Returns ``{part: seconds per step}`` for every part in :data:`PARTS`.
    """
    check_int("steps", steps, low=1)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    for _ in range(warmup):
        step()
    synchronize(device)

    handles, open_ranges = [], {}
    for name, module in model.named_modules():
        part = _part_of_module(name, module)
        if part is None:
            continue

        def enter(mod, args, part=part):
            open_ranges.setdefault(id(mod), []).append(record_function(_TAG + part).__enter__())

        def leave(mod, args, out):
            open_ranges[id(mod)].pop().__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    _quiet_profiler()
    try:
        with profile(activities=activities) as prof:
            for _ in range(steps):
                step()
            synchronize(device)
    finally:
        for h in handles:
            h.remove()

    events = prof.events()
    use_device_time = device.type == "cuda"

    def tagged(event) -> str | None:
        """The innermost module part around ``event`` (in forward), or None; attention's softmax
        on its own."""
        name = event.name
        while event is not None:
            if event.name.startswith(_TAG):
                part = event.name[len(_TAG):]
                return "softmax" if part == "attention" and "softmax" in name else part
            event = event.cpu_parent
        return None

    def enclosing(event, prefix: str):
        while event is not None and not event.name.startswith(prefix):
            event = event.cpu_parent
        return event

    # forward: which part each autograd-recording operation belongs to
    forward_part: dict[int, str] = {}
    for e in events:
        if e.sequence_nr < 0 or e.name.startswith(_BACKWARD):
            continue
        part = tagged(e)
        if part is None and any(op in e.name for op in _LOSS_OPS):
            part = "loss"
        if part is not None:
            forward_part.setdefault(e.sequence_nr, part)

    def backward_optimizer_or_loss(e) -> str:
        """The part of an operation outside every module's forward."""
        if (bw := enclosing(e, _BACKWARD)) is not None:
            return forward_part.get(bw.sequence_nr, "other")  # the backward of a forward operation
        if enclosing(e, "Optimizer.") is not None:
            return "optimizer"
        parent = e.cpu_parent.name if e.cpu_parent is not None else ""
        if any(op in e.name or op in parent for op in _LOSS_OPS):
            return "loss"
        return "other"

    seconds: dict[str, float] = defaultdict(float)
    for e in events:
        if e.name.startswith(_TAG):
            continue  # the markers themselves
        if use_device_time and e.device_type != DeviceType.CPU:
            continue  # a GPU kernel: its time is counted with the CPU operation that launched it
        us = e.self_device_time_total if use_device_time else e.self_cpu_time_total
        if not us:
            continue
        seconds[tagged(e) or backward_optimizer_or_loss(e)] += us * 1e-6 / steps
    return {part: seconds.get(part, 0.0) for part in PARTS}


# ----------------------------------------------------------------------------------------- memory


def _tensor_bytes(tensors) -> int:
    storages = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(storages.values())


def peak_memory(step: Callable[[], Any], model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> int:
    """Bytes allocated at the fullest moment of one call of ``step()``, everything included.

    On a GPU: PyTorch's allocator statistics (``torch.cuda.max_memory_allocated``). On the CPU,
    which keeps no such statistics: the parameters, gradients and optimizer state that exist
    before the step, plus the largest running total of the allocations and frees that
    ``torch.profiler`` records during it (activations, gradients, temporaries). Run a step first,
    so that the optimizer state exists.
    """
    device = next(model.parameters()).device
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        synchronize(device)
        return int(torch.cuda.max_memory_allocated(device))
    params = list(model.parameters())
    state = [] if optimizer is None else [v for s in optimizer.state.values() for v in s.values()]
    before = _tensor_bytes(params + [p.grad for p in params if p.grad is not None] + state)
    _quiet_profiler()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    try:  # every allocation and free, in time order (including frees outside any operation)
        raw = prof.profiler.kineto_results.events()
        changes = sorted((e.start_ns(), e.nbytes()) for e in raw if e.name() == "[memory]")
        deltas = [nbytes for _, nbytes in changes]
    except AttributeError:  # an older profiler: the allocations attributed to operations
        deltas = [e.self_cpu_memory_usage for e in sorted(prof.events(), key=lambda e: e.time_range.start)]
    running = peak = 0
    for nbytes in deltas:
        running += nbytes
        peak = max(peak, running)
    return before + peak


# ---------------------------------------------------------------------------------------- machine


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """What a measurement was taken on: CPU, cores, PyTorch's threads, the load average, the GPU if any."""
    info = {
        "cpu": cpu_name(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }
    return info
