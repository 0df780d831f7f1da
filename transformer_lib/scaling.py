"""What scaling out costs: the bytes an all-reduce moves, and the memory each GPU needs.

Taught in chapter 12, *Scaling out* (``book/12_scaling_out.ipynb``); ``distributed.py`` is the machinery.

* **Ring all-reduce** (Patarasuk and Yuan, 2009; Baidu's and Horovod's): ``N`` workers in a ring, each
  vector cut into ``N`` chunks. ``N - 1`` steps of *reduce-scatter* (each worker passes a chunk to
  its neighbour, who adds its own) leave every worker with one chunk summed over all; ``N - 1``
  steps of *all-gather* pass the summed chunks round. Each worker sends ``2 (N - 1) / N`` times the
  vector's bytes, whatever ``N``: the bandwidth term does not grow with the number of workers.
* **Memory per GPU** for data parallelism (DDP) and the stages of ZeRO (Rajbhandari et al., 2020):
  stage 1 shards the optimizer state over the ``N`` GPUs, stage 2 the gradients too, stage 3 (FSDP)
  the weights too. Bytes per parameter with AdamW: fp32 training keeps weights, gradients and the
  two moments in fp32 (4 + 4 + 8); bf16 mixed precision keeps bf16 weights and gradients and fp32
  master weights and moments (2 + 2 + 12), the ZeRO paper's accounting. Activations are not sharded:
  each GPU holds those of its own micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ._checks import check_choice, check_int
from .training import Callback

# ---- ring all-reduce ---------------------------------------------------------------------------------


@dataclass
class RingStep:
    """One step of a ring all-reduce: every worker ``i`` sends chunk ``sent[i]`` to worker ``(i + 1) % N``."""

    phase: str  # "reduce-scatter" or "all-gather"
    sent: list[int]  # the chunk each worker sends
    holds: list[list[frozenset[int]]]  # after the step: holds[worker][chunk] = the workers summed into it


def ring_all_reduce(vectors: list[Tensor]) -> tuple[list[Tensor], list[RingStep]]:
    """Sum ``vectors`` (one per worker, equal shapes) as a ring all-reduce does; returns every worker's
    result and the steps, for :func:`transformer_lib.viz.scaling.ring_explorer`.

    Each worker's vector is cut into ``N`` chunks (``torch.tensor_split``: sizes may differ by one).
    Reduce-scatter step ``s``: worker ``i`` sends chunk ``(i - s) % N``, which worker ``i + 1`` adds to
    its own. All-gather step ``s``: worker ``i`` sends its complete chunk ``(i + 1 - s) % N``, which
    worker ``i + 1`` keeps.
    """
    n = len(vectors)
    check_int("len(vectors)", n, low=1)
    shapes = {tuple(v.shape) for v in vectors}
    if len(shapes) != 1:
        raise ValueError(f"every worker's vector must have the same shape, got {sorted(shapes)}")
    chunks = [list(torch.tensor_split(v.flatten().clone(), n)) for v in vectors]
    holds = [[frozenset([i]) for _ in range(n)] for i in range(n)]
    steps = []
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(n - 1):
            sent = [(i - s) % n if phase == "reduce-scatter" else (i + 1 - s) % n for i in range(n)]
            outgoing = [(chunks[i][c].clone(), holds[i][c]) for i, c in enumerate(sent)]  # all send at once
            for i, c in enumerate(sent):
                data, who = outgoing[i]
                j = (i + 1) % n
                if phase == "reduce-scatter":
                    chunks[j][c] = chunks[j][c] + data
                    holds[j][c] = holds[j][c] | who
                else:
                    chunks[j][c] = data
                    holds[j][c] = who
            steps.append(RingStep(phase, sent, [list(h) for h in holds]))
    results = [torch.cat(c).view_as(vectors[0]) for c in chunks]
    return results, steps


def ring_bytes_sent(n_bytes: float, world_size: int) -> float:
    """Bytes each worker sends in a ring all-reduce of ``n_bytes``: ``2 (N - 1) / N * n_bytes``."""
    check_int("world_size", world_size, low=1)
    return 2 * (world_size - 1) / world_size * n_bytes


# ---- memory per GPU -------------------------------------------------------------------------------

STRATEGIES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP")
# bytes per parameter: (weights, gradients, optimizer state: AdamW's two moments, and fp32 master weights
# when the weights themselves are bf16)
PRECISIONS = {"fp32": (4, 4, 8), "bf16": (2, 2, 12)}
ACTIVATION_BYTES = {"fp32": 4, "bf16": 2}


def memory_per_gpu(n_params: int, world_size: int, strategy: str, precision: str = "bf16",
                   activations: float = 0.0) -> dict[str, float]:
    """Bytes one GPU holds for weights, gradients, optimizer state and activations.

    ``strategy``: one of :data:`STRATEGIES`; ZeRO stage ``k`` divides the first ``k`` of optimizer
    state, gradients and weights by ``world_size``. ``activations``: this GPU's activation bytes
    (:func:`activation_bytes`), never divided. Not counted: FSDP's all-gathered block (one block's
    weights at a time, while it computes), communication buffers, the framework's own memory.
    """
    check_int("n_params", n_params, low=0)
    check_int("world_size", world_size, low=1)
    check_choice("strategy", strategy, STRATEGIES)
    check_choice("precision", precision, PRECISIONS)
    weights, grads, optimizer = (b * n_params for b in PRECISIONS[precision])
    stage = STRATEGIES.index(strategy)  # 0 for DDP
    n = world_size
    return {"weights": weights / n if stage >= 3 else weights,
            "gradients": grads / n if stage >= 2 else grads,
            "optimizer state": optimizer / n if stage >= 1 else optimizer,
            "activations": float(activations)}


def activation_values_per_token(config) -> dict[str, int]:
    """The values a training step keeps per token for the backward pass, by where they are kept.

    Counted from what this library's fast path saves (``tl.fast_path``: fused attention, which never
    stores the ``T x T`` weights; one-kernel GELU and norms; no dropout, no activation
    checkpointing), per layer:

    * attention: the norm's input and output, Q, K and V, the attention output and its merged
      heads (``7 d_model``), and the rotated Q and K with RoPE (``2 d_model`` more);
    * the second norm's input and output (``2 d_model``); an RMSNorm also keeps its normalised
      input (``d_model`` more per norm);
    * FFN: the input and output of the activation (``2 d_ff``); gated (SwiGLU) four ``d_ff``-sized
      tensors: the gate, the up projection, the activation and their product;

    and once: the final norm's input and output (``2 d_model``, and the RMSNorm's one more), and the
    log-softmax of the logits with, while the backward pass starts, the logits' gradient
    (``2 vocab_size``). A few values per token (norm statistics, attention's log-sum-exp) are left out.
    """
    from .layers.feedforward import gated_hidden_size

    d, gated = config.d_model, config.ffn in ("swiglu", "geglu")
    d_ff = config.d_ff or (gated_hidden_size(d, config.ffn_multiple_of) if gated else 4 * d)
    norm = d if config.norm == "rmsnorm" else 0  # what an RMSNorm keeps beyond a LayerNorm
    attention = 7 * d + (2 * d if config.positional == "rope" else 0) + norm
    ffn = 2 * d + norm + (4 if gated else 2) * d_ff
    output = 2 * d + norm + 2 * config.vocab_size
    return {"per layer": attention + ffn, "layers": config.n_layers * (attention + ffn), "output": output,
            "total": config.n_layers * (attention + ffn) + output}


def activation_bytes(config, tokens: int, precision: str = "bf16") -> float:
    """Activation bytes of a micro-batch of ``tokens`` tokens (batch x sequence length).

    In bf16 the values are 2 bytes, except the log-softmax and the logits' gradient, which the
    loss keeps in fp32 (4 bytes).
    """
    check_choice("precision", precision, ACTIVATION_BYTES)
    values = activation_values_per_token(config)
    logits = 2 * config.vocab_size  # kept in fp32 by the loss
    return tokens * ((values["total"] - logits) * ACTIVATION_BYTES[precision] + logits * 4)


def peak_allocated(fn) -> int:
    """The most bytes PyTorch had allocated at once on the CPU while ``fn()`` ran (what
    ``torch.cuda.max_memory_allocated`` reports on a GPU), counted from ``fn``'s start.

    Read from the profiler's memory events (``profile_memory=True``): every allocation and free, with
    the running total, in the trace it exports.
    """
    import json
    import os
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    from .speed import _quiet_profiler

    _quiet_profiler()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    handle, path = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.remove(path)
    totals = [e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]"
              and e["args"].get("Device Type", 0) == 0]
    if not totals:
        raise ValueError("the profiler recorded no CPU memory events: did fn allocate anything on the CPU?")
    return max(totals)


def count_parameters_of(config, model_class=None) -> int:
    """The parameter count of ``model_class(config)`` (``GPT2`` by default), built on the meta
    device: no memory, so a 7-billion-parameter model is counted in a moment."""
    from .models import GPT2

    with torch.device("meta"):
        model = (model_class or GPT2)(config)
    return model.num_parameters()


# ---- where a distributed step's time goes ------------------------------------------------------------

COMMUNICATION = {"all_reduce": "all-reduce", "allreduce": "all-reduce", "all_gather": "all-gather",
                 "allgather": "all-gather", "reduce_scatter": "reduce-scatter",
                 "reducescatter": "reduce-scatter"}


def _communication(name: str) -> str | None:
    """The collective an event is, from its name (gloo's "gloo:all_reduce", NCCL's kernels), or None."""
    low = name.lower()
    if not (low.startswith("gloo:") or "nccl" in low):
        return None
    return next((phase for key, phase in COMMUNICATION.items() if key in low), "other communication")


def step_timeline(events) -> list[dict]:
    """One profiled training step as bars: ``lane`` (compute, communication), ``phase``, ``start``, ``end``
    (milliseconds from the step's first event) and ``name``.

    ``events``: ``prof.events()`` of a ``torch.profiler.profile`` around one step. Compute is the
    training thread's top-level operations, grouped into forward (up to the first backward operation),
    backward (the autograd engine's), optimizer (``Optimizer.step`` and ``zero_grad``) and other (the batch,
    clipping); communication is every collective the backend ran, on its own threads.
    """
    top = [e for e in events if e.cpu_parent is None and e.time_range.end > e.time_range.start]
    comms = [e for e in top if _communication(e.name)]
    optimizer = [e for e in top if e.name.startswith("Optimizer.")]
    if not optimizer:
        raise ValueError("no Optimizer.step among the events: profile a whole training step")
    main = optimizer[0].thread  # on a GPU the backward pass runs on the autograd engine's own thread
    on_main = [e for e in top if e.thread == main or (e.name.startswith("autograd::") and e not in comms)]
    compute = sorted(on_main, key=lambda e: e.time_range.start)
    t0 = min(e.time_range.start for e in compute + comms)
    backward = [e for e in compute if e.name.startswith("autograd::") or "post_backward" in e.name]
    first_backward = min((e.time_range.start for e in backward), default=float("inf"))
    starts_forward = ("DistributedDataParallel.forward", "FSDP::root_pre_forward")
    first_forward = min((e.time_range.start for e in compute if e.name.startswith(starts_forward)),
                        default=t0)
    bars = []
    # FSDP's hooks (gathering and freeing parameters, mostly waiting for the collectives), at any depth:
    # inside the backward pass they run within the autograd engine's operations
    for e in events:
        if e.name.startswith("FSDP::") and e.thread == main and e.time_range.end > e.time_range.start:
            bars.append({"lane": "compute", "phase": "FSDP hooks", "name": e.name,
                         "start": (e.time_range.start - t0) / 1e3, "end": (e.time_range.end - t0) / 1e3})
    for e in compute:
        if e.name.startswith("FSDP::"):
            continue
        if e in backward:
            phase = "backward"
        elif e.name.startswith("Optimizer."):
            phase = "optimizer"
        elif first_forward <= e.time_range.start < first_backward:
            phase = "forward"
        else:
            phase = "other compute"
        bars.append({"lane": "compute", "phase": phase, "name": e.name,
                     "start": (e.time_range.start - t0) / 1e3, "end": (e.time_range.end - t0) / 1e3})
    for e in comms:
        bars.append({"lane": "communication", "phase": _communication(e.name), "name": e.name,
                     "start": (e.time_range.start - t0) / 1e3, "end": (e.time_range.end - t0) / 1e3})
    return _merge(bars)


def _merge(bars: list[dict], gap_ms: float = 0.05) -> list[dict]:
    """Consecutive bars of one lane and phase, less than ``gap_ms`` apart, as one bar (fewer to draw)."""
    merged: list[dict] = []
    for bar in sorted(bars, key=lambda b: (b["lane"], b["start"])):
        last = merged[-1] if merged else None
        if (last and last["lane"] == bar["lane"] and last["phase"] == bar["phase"]
                and bar["start"] - last["end"] < gap_ms and bar["lane"] == "compute"):
            last["end"] = max(last["end"], bar["end"])
            last["count"] += 1
            last["name"] = f"{last['count']} operations"
        else:
            merged.append({**bar, "count": 1})
    return merged


def timeline_summary(bars: list[dict]) -> dict[str, float]:
    """Milliseconds: the step, its compute (the training thread's operations, by phase; FSDP's hooks, which
    mostly wait for the collectives, apart), its communication (time any collective ran) and how much of
    the communication ran while the training thread computed."""
    def union(intervals):
        total, end = 0.0, float("-inf")
        for s, e in sorted(intervals):
            if e > end:
                total += e - max(s, end)
                end = e
        return total

    def meet(xs, ys):  # the parts of the intervals xs that lie within ys
        return [(max(a, c), min(b, d)) for a, b in xs for c, d in ys if min(b, d) > max(a, c)]

    def spans(phase):
        return [(b["start"], b["end"]) for b in bars if b["phase"] == phase]

    hooks = spans("FSDP hooks")
    comm = [(b["start"], b["end"]) for b in bars if b["lane"] == "communication"]
    out = {"step": max(b["end"] for b in bars), "FSDP hooks": union(hooks), "communication": union(comm)}
    busy = []
    for phase in ("forward", "backward", "optimizer", "other compute"):  # without the hooks inside them
        out[phase] = union(spans(phase)) - union(meet(spans(phase), hooks))
        busy += spans(phase)
    out["compute"] = union(busy) - union(meet(busy, hooks))
    overlapped = meet(busy, comm)
    out["overlapped"] = union(overlapped) - union(meet(overlapped, hooks))
    return out


class StepTimeline(Callback):
    """A callback for ``tl.train`` that profiles training step ``step`` on rank 0 (where callbacks run)
    and keeps it as :func:`step_timeline` bars in ``self.bars``."""

    def __init__(self, step: int = 3) -> None:
        from .speed import _quiet_profiler

        check_int("step", step, low=1)
        self.step, self.bars, self._profile = step, None, None
        _quiet_profiler()  # before the profiler's first use in this process

    def on_step(self, state, model) -> None:
        from torch.profiler import ProfilerActivity, profile

        if state.step == self.step - 1:  # the next step is the one to profile
            activities = [ProfilerActivity.CPU]
            if next(model.parameters()).is_cuda:
                activities.append(ProfilerActivity.CUDA)
            self._profile = profile(activities=activities)
            self._profile.__enter__()
        elif state.step == self.step and self._profile is not None:
            if next(model.parameters()).is_cuda:
                torch.cuda.synchronize()
            self._profile.__exit__(None, None, None)
            self.bars = step_timeline(self._profile.events())
            self._profile = None
