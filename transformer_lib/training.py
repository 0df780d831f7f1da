"""The one training loop every chapter uses.

Taught in chapter 7, *GPT-2* (``book/07_gpt2.ipynb``); reused by chapters 6, 8, 9 and 10.

    for step in range(max_steps):
        lr = warm-up, then cosine decay (or the original Transformer's inverse square root)
        loss = loss_fn(model, next batch)          # bf16/fp16 autocast on a GPU
        loss.backward(); clip gradients; AdamW step
        every eval_interval steps: mean train and validation loss on a few batches, callbacks

On many devices (chapter 12, *Scaling out*): the same script under ``torchrun`` with
``TrainConfig(parallel="ddp")`` or ``"fsdp"`` trains on the same batches, each process on its share
(``distributed.py``); ``gradient_accumulation_steps`` splits a batch in time as processes split it in
space; ``checkpoint_dir`` makes a run resumable, step for step (``checkpoints.py``).

Speed (measured in chapter 11, *Making it fast*, and by ``python -m benchmarks``): no ``.item()``
(a GPU sync) except when logging; by default fused AdamW wherever PyTorch has the kernel
(``fused_optimizer=True``) and fused attention, activation and norm kernels while training
(``fast_path=True``; the modules keep the written-out path the chapters read outside ``train``); optional
``torch.compile`` of the loss. Decay applies to matrices only (weights of linear layers and embeddings),
not to biases and norm gains, as in GPT-2 and nanoGPT.
"""

from __future__ import annotations

import inspect
import math
import re
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, is_dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from . import checkpoints, distributed
from ._checks import (check_betas, check_bool, check_device, check_int, check_positive, check_real,
                      check_schedule_reaches_its_peak, check_train_arguments, describe, hot_path)
from .distributed import Parallel, split_batch
from .losses import check_label_smoothing
from .speed import fast_path

Batch = Any  # a tensor, a tuple of tensors, or a dict of tensors


def auto_device() -> torch.device:
    """CUDA if there is a GPU, else Apple's MPS, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def lr_at(step: int, lr: float, min_lr: float, warmup_steps: int, max_steps: int) -> float:
    """Linear warm-up from ~0 to ``lr`` over ``warmup_steps``, then cosine decay to ``min_lr``
    at ``max_steps``."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def inverse_sqrt_lr(step: int, lr: float, warmup_steps: int) -> float:
    """The original Transformer's schedule (Vaswani et al. 2017, eq. 3): linear warm-up to ``lr``
    over ``warmup_steps``, then decay as ``1/sqrt(step)``. Defined in chapter 9.

    With ``lr = transformer_peak_lr(d_model, warmup_steps)`` it is the paper's
    ``d_model**-0.5 * min(n**-0.5, n * warmup_steps**-1.5)`` at step ``n = step + 1``.
    """
    n = step + 1
    if warmup_steps == 0:
        return lr / math.sqrt(n)
    return lr * min(n / warmup_steps, math.sqrt(warmup_steps / n))


def transformer_peak_lr(d_model: int, warmup_steps: int) -> float:
    """The peak of the paper's schedule, reached at the end of warm-up: ``(d_model * warmup)**-0.5``
    (7.0e-4 for the base model: d_model 512, 4000 warm-up steps)."""
    check_int("d_model", d_model, low=1)
    check_int("warmup_steps", warmup_steps, low=1)
    return (d_model * warmup_steps) ** -0.5


SCHEDULES = ("cosine", "inverse_sqrt")


def make_optimizer(
    model: nn.Module, lr: float, weight_decay: float = 0.1, betas: tuple[float, float] = (0.9, 0.95),
    fused: bool | None = None, eps: float = 1e-8,
) -> torch.optim.AdamW:
    """AdamW with two groups: matrices (dim >= 2) decayed, vectors (biases, norm gains) not.

    ``fused``: one kernel updates every tensor (instead of a handful of ops per tensor). None: on
    CUDA only; True: wherever PyTorch has the kernel (CPU included), else the default
    implementation; False: never. The fused kernel rounds differently, so results change in the
    last digits. ``eps``: Adam's epsilon (the original Transformer: 1e-9).
    """
    params = list({id(p): p for p in model.parameters() if p.requires_grad}.values())  # a tied tensor once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if fused is None:
        fused = bool(params) and all(p.is_cuda for p in params)
    elif fused:
        try:
            return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=True)
        except RuntimeError:  # no fused kernel for this device or dtype
            fused = False
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def to_device(batch: Batch, device: torch.device) -> Batch:
    if isinstance(batch, Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def default_loss(model: nn.Module, batch: Batch, label_smoothing: float = 0.0) -> Tensor:
    """``model.loss(*batch)`` for a tuple (GPT-2: inputs, targets), ``model.mlm_loss(**batch)``
    for a dict (BERT); ``label_smoothing`` is passed on when it is not 0."""
    method = "mlm_loss" if isinstance(batch, dict) else "loss"
    if method == "loss" and (not isinstance(batch, (tuple, list)) or len(batch) < 2):
        raise TypeError(f"the batch function returned {describe(batch)}, but the default loss_fn calls "
                        "model.loss(inputs, targets) and needs both: return (inputs, targets), as "
                        "tl.BatchSampler and nanoGPT's get_batch do, or pass loss_fn=your_loss(model, batch)")
    loss = getattr(model, method, None)
    if not callable(loss):
        raise TypeError(
            f"the default loss_fn calls model.{method}(...) for a {type(batch).__name__} batch, but "
            f"{type(model).__name__} has no {method}() method: pass loss_fn=your_loss(model, batch)"
        )
    kwargs = {"label_smoothing": label_smoothing} if label_smoothing else {}
    return loss(**batch, **kwargs) if isinstance(batch, dict) else loss(*batch, **kwargs)


@dataclass
class TrainConfig:
    """Settings of :func:`train`. Defined in chapter 7."""

    max_steps: int = 1000
    lr: float = 1e-3
    min_lr: float | None = None  # None: lr / 10
    warmup_steps: int | None = None  # None: 100, or a tenth of max_steps if that is fewer
    schedule: str = "cosine"  # or "inverse_sqrt": the original Transformer's (min_lr unused)
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8  # Adam's epsilon
    label_smoothing: float = 0.0  # the training loss only; evaluations report plain cross-entropy
    grad_clip: float | None = 1.0
    eval_interval: int = 100  # steps between evaluations (and log lines)
    eval_steps: int = 20  # batches averaged per evaluation
    device: str | None = None  # None: auto_device()
    mixed_precision: bool = True  # on CUDA: bf16 where native (A100, L4, H100), else fp16 + gradient scaler (T4); ignored on CPU
    compile: bool = False  # torch.compile the loss (the model's forward and the loss function)
    # the defaults train fast (fused kernels compute the same function in less time); the modules keep
    # their own (explicit) settings outside tl.train, which is the path the chapters read
    fast_path: bool | None = True  # True: fused kernels (attention, activations, norms) while training; None: as built
    fused_optimizer: bool | None = True  # True: fused AdamW wherever PyTorch has it; None: on CUDA only
    progress: bool = True  # a tqdm progress bar
    seed: int = 0
    # scaling out and resuming (chapter 12)
    parallel: str | None = None  # "ddp" or "fsdp": one process per device under torchrun, the same training
    gradient_accumulation_steps: int = 1  # each batch in this many micro-batches, their gradients summed
    checkpoint_dir: str | Path | None = None  # resumable: checkpoints here, and a new run continues the latest
    checkpoint_every: int | None = None  # steps between checkpoints (and after the last); None: eval_interval

    def __post_init__(self) -> None:
        check_int("max_steps", self.max_steps, low=1)
        if self.warmup_steps is None:
            self.warmup_steps = min(100, self.max_steps // 10)
        check_int("warmup_steps", self.warmup_steps, low=0)
        check_schedule_reaches_its_peak(self.max_steps, self.warmup_steps)
        check_int("eval_interval", self.eval_interval, low=1)
        check_int("eval_steps", self.eval_steps, low=1)
        check_positive("lr", self.lr)
        check_positive("eps", self.eps)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        check_label_smoothing(self.label_smoothing)
        if self.min_lr is None:
            self.min_lr = self.lr / 10
        check_real("min_lr", self.min_lr)
        if not 0 <= self.min_lr <= self.lr:
            raise ValueError(f"min_lr must be in [0, lr={self.lr}], got {self.min_lr}")
        check_real("weight_decay", self.weight_decay, low=0.0)  # AdamW shrinks weights toward 0, never away
        self.betas = check_betas(self.betas)
        if self.grad_clip is not None:
            check_positive("grad_clip", self.grad_clip)
        for name in ("fast_path", "fused_optimizer"):
            if getattr(self, name) is not None:
                check_bool(name, getattr(self, name))
        for name in ("mixed_precision", "compile", "progress"):
            check_bool(name, getattr(self, name))
        check_int("seed", self.seed)
        check_device(self.device)
        self._check_scaling_out()

    def _check_scaling_out(self) -> None:
        distributed.check_parallel(self.parallel)
        check_int("gradient_accumulation_steps", self.gradient_accumulation_steps, low=1)
        if self.checkpoint_every is not None:
            check_int("checkpoint_every", self.checkpoint_every, low=1)
            if self.checkpoint_dir is None:
                raise ValueError(f"checkpoint_every={self.checkpoint_every} needs checkpoint_dir: the folder to "
                                 "write the checkpoints into")
        if self.checkpoint_dir is not None and not isinstance(self.checkpoint_dir, (str, Path)):
            raise TypeError(f"checkpoint_dir must be a folder (str or Path), got {type(self.checkpoint_dir).__name__}")


@dataclass
class TrainState:
    """What callbacks see. Losses are Python floats, set at evaluation steps."""

    step: int = 0  # optimisation steps done
    max_steps: int = 0  # steps this run will take
    lr: float = 0.0
    train_loss: float | None = None
    val_loss: float | None = None
    elapsed: float = 0.0  # seconds since the start of training
    history: list[dict] = field(default_factory=list)  # one dict per evaluation
    loss: Tensor | None = None  # the last step's training loss (this process's share), unread: .item() syncs


class Callback:
    """Override any of these to watch training (the live loss chart is one)."""

    def on_train_start(self, state: TrainState, model: nn.Module) -> None: ...

    def on_eval(self, state: TrainState, model: nn.Module) -> None: ...

    def on_step(self, state: TrainState, model: nn.Module) -> None:
        """After every optimisation step (``state.step`` and ``state.elapsed`` are set; the losses
        are those of the last evaluation). Keep it cheap: it runs in the training loop."""

    def on_train_end(self, state: TrainState, model: nn.Module) -> None: ...


def mixed_precision_dtype(device: torch.device | str) -> torch.dtype | None:
    """The autocast dtype for a GPU: bf16 where its tensor cores compute it, else fp16; None on a CPU.

    bf16 runs in hardware from compute capability 8.0 (A100, L4, H100) and on AMD GPUs. Not
    ``torch.cuda.is_bf16_supported()``: by default it also answers yes where bf16 is only emulated,
    as on Colab's T4, which then runs several times slower than in fp16.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return None
    if torch.version.hip or torch.cuda.get_device_capability(device)[0] >= 8:
        return torch.bfloat16
    return torch.float16


def autocast_settings(device: torch.device, mixed_precision: bool) -> tuple[torch.dtype | None, bool]:
    """``(autocast dtype or None, use a gradient scaler)``: bf16 where native, else fp16 + scaler (T4, V100)."""
    dtype = mixed_precision_dtype(device) if mixed_precision else None
    return dtype, dtype == torch.float16


@torch.no_grad()
def estimate_loss(
    model: nn.Module, batches: Callable[[], Batch], steps: int, loss_fn=default_loss, device=None, dtype=None
) -> float:
    """Mean loss over ``steps`` batches in eval mode (one GPU sync at the end)."""
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    total = torch.zeros((), device=device)
    for _ in range(steps):
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            total += loss_fn(model, to_device(batches(), device)).float()
    model.train(was_training)
    return (total / steps).item()


class TrainStep:
    """One optimisation step of :func:`train`: forward (autocast on a GPU), backward, clipping, AdamW.

    ``step(batch, lr)`` returns the loss as a tensor without reading it: ``.item()`` would make
    the CPU wait for the GPU at every step. Chapter 11 times and profiles it.

    With ``gradient_accumulation_steps=k`` the batch is cut into ``k`` micro-batches, run one after
    the other, each loss divided by ``k``: the summed gradients are those of the whole batch, with
    the activations of one micro-batch in memory at a time. Under torchrun, ``parallel`` (chapter
    12) runs the loss through DDP or FSDP, whose gradient all-reduce waits for the last micro-batch.
    """

    def __init__(self, model: nn.Module, config: TrainConfig,
                 loss_fn: Callable[[nn.Module, Batch], Tensor] = default_loss,
                 parallel: Parallel | None = None) -> None:
        self.model, self.config = model, config
        self.device = next(model.parameters()).device
        self.parallel = parallel or Parallel(None, self.device)
        self.dtype, use_scaler = autocast_settings(self.device, config.mixed_precision)
        # one process: loss_fn itself; DDP or FSDP: loss_fn through the wrapper (before the optimizer:
        # FSDP replaces the parameters by their shards); evaluations use it too
        self.eval_loss_fn = loss_fn = self.parallel.wrap(model, loss_fn)
        # fp16's loss scaler (a T4). Under FSDP the gradients are sharded DTensors, whose overflow check
        # all-reduces its flag: every rank skips the same steps
        self.scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
        self.optimizer = make_optimizer(model, config.lr, config.weight_decay, config.betas,
                                        fused=config.fused_optimizer, eps=config.eps)
        if config.label_smoothing:  # training only: evaluations call loss_fn without it
            if "label_smoothing" not in inspect.signature(loss_fn).parameters:
                raise ValueError("TrainConfig.label_smoothing is passed to loss_fn(model, batch, "
                                 "label_smoothing=...), but your loss_fn has no such argument")
            loss_fn = partial(loss_fn, label_smoothing=config.label_smoothing)
        # compile the loss, not the model: model.loss(...) calls the module itself, which
        # torch.compile(model) would leave uncompiled
        self.loss_fn = torch.compile(loss_fn) if config.compile else loss_fn

    def __call__(self, batch: Batch, lr: float) -> Tensor:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        k = self.config.gradient_accumulation_steps
        loss = None
        for i, micro in enumerate(split_batch(batch, k, f"gradient_accumulation_steps={k}")):
            # DDP/FSDP: the gradients are averaged over the processes once, after the last micro-batch
            with self.parallel.no_sync(sync=i == k - 1):
                micro = to_device(micro, self.device)
                with hot_path(), torch.autocast(self.device.type, self.dtype, enabled=self.dtype is not None):
                    micro_loss = self.loss_fn(self.model, micro)
                    if k > 1:
                        micro_loss = micro_loss / k  # the mean over the whole batch
                self.scaler.scale(micro_loss).backward()
            loss = micro_loss.detach() if loss is None else loss + micro_loss.detach()
        if self.config.grad_clip is not None:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return loss


def train(
    model: nn.Module,
    train_batches: Callable[[], Batch],
    val_batches: Callable[[], Batch] | None = None,
    config: TrainConfig | None = None,
    loss_fn: Callable[[nn.Module, Batch], Tensor] = default_loss,
    callbacks: list[Callback] = (),
) -> TrainState:
    """Train ``model`` in place and return the final :class:`TrainState` (its ``history`` has
    every evaluation).

    Args:
        train_batches, val_batches: functions returning a fresh batch, e.g. a :class:`BatchSampler`.
        loss_fn: ``loss_fn(model, batch) -> scalar loss``; see :func:`default_loss`.
        callbacks: :class:`Callback` objects (``on_train_start``, ``on_eval``, ``on_step``, ``on_train_end``).

    Under ``torchrun`` with ``config.parallel`` set, every process runs this same function: each takes
    its share of every batch, the evaluations are averaged over the processes, and only rank 0 shows
    progress, calls the callbacks and writes checkpoints (chapter 12).
    """
    check_train_arguments(model, train_batches, val_batches, config, loss_fn, callbacks)
    config = config or TrainConfig()
    run = distributed.start(config.parallel, config.device)  # rank 0 of 1, or one of torchrun's processes
    torch.manual_seed(config.seed + run.rank)  # a run repeats; under torchrun, dropout differs between ranks
    model.to(run.device).train()
    step_fn = TrainStep(model, config, loss_fn, run)  # forward, backward, clipping, AdamW
    # fast_path: fused kernels while training; each module's own setting comes back afterwards
    kernels = (nullcontext() if config.fast_path is None
               else fast_path(model, config.fast_path, config.fast_path))
    # every rank draws the same batches and trains on its share; the draws are counted, to resume
    saver = checkpoints.Checkpointer(config, run)
    train_batches, val_batches = saver.track(train_batches, val_batches)
    my_train = run.shard(train_batches)
    my_val = run.shard(val_batches) if val_batches is not None else None

    state = TrainState(max_steps=config.max_steps)
    saver.resume(state, model, step_fn)  # from the latest checkpoint in config.checkpoint_dir, if any
    callbacks = callbacks if run.is_main else ()  # logging, the chart and samples: rank 0 only
    start = time.perf_counter() - state.elapsed
    for cb in callbacks:
        cb.on_train_start(state, model)
    bar = None
    if config.progress and run.is_main:
        from tqdm.auto import tqdm

        bar = tqdm(total=config.max_steps, initial=state.step, desc="training", leave=True)

    def evaluate(step: int) -> None:
        state.step = step
        state.train_loss = run.average(estimate_loss(model, my_train, config.eval_steps, step_fn.eval_loss_fn,
                                                     run.device, step_fn.dtype))
        if val_batches is not None:
            state.val_loss = run.average(estimate_loss(model, my_val, config.eval_steps, step_fn.eval_loss_fn,
                                                       run.device, step_fn.dtype))
        state.elapsed = time.perf_counter() - start
        state.history.append(
            {"step": step, "lr": state.lr, "train_loss": state.train_loss, "val_loss": state.val_loss,
             "elapsed": state.elapsed}
        )
        if bar is not None:
            val = "-" if state.val_loss is None else f"{state.val_loss:.3f}"
            bar.set_postfix(train=f"{state.train_loss:.3f}", val=val)
        for cb in callbacks:
            cb.on_eval(state, model)

    with kernels:
        for step in range(state.step, config.max_steps):
            if step % config.eval_interval == 0:
                evaluate(step)
            if config.schedule == "cosine":
                state.lr = lr_at(step, config.lr, config.min_lr, config.warmup_steps, config.max_steps)
            else:  # the original Transformer's
                state.lr = inverse_sqrt_lr(step, config.lr, config.warmup_steps)
            state.loss = step_fn(my_train(), state.lr)  # the loss stays on the device: no sync
            if bar is not None:
                bar.update(1)
            state.step, state.elapsed = step + 1, time.perf_counter() - start
            for cb in callbacks:
                cb.on_step(state, model)
            if saver.due(state.step):
                saver.save(state, model, step_fn)
        evaluate(config.max_steps)
    if bar is not None:
        bar.close()
    model.eval()
    for cb in callbacks:
        cb.on_train_end(state, model)
    return state


CHECKPOINT_FORMAT = 2  # 1: the same keys without "format" (still read)


def save_checkpoint(path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, **extra) -> Path:
    """Save the model's weights (a tied tensor is restored as tied), its config, and optionally the optimizer.

    ``extra`` holds plain values (numbers, strings, ``None``, tensors, and lists, tuples and dicts of
    them), e.g. ``step=1000``: :func:`load_checkpoint` never unpickles code, so anything else is
    refused here rather than found unreadable later. The file is written under a temporary name and
    renamed when complete: an interrupted save leaves the previous file as it was.
    """
    path = Path(path)
    for name, value in extra.items():
        _check_plain(f"{name}=", value, name)
    if path.is_dir():
        raise IsADirectoryError(f"save_checkpoint writes one file, and {path} is a folder: give a file name, "
                                f"e.g. {path / 'checkpoint.pt'}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if distributed.is_sharded(model):
        raise ValueError("this model is sharded by TrainConfig(parallel='fsdp'): save_checkpoint needs the whole "
                         "model in one process. Use TrainConfig(checkpoint_dir=...), which saves the shards, or "
                         "tl.distributed.full_state_dict(model) on every rank")
    config = getattr(model, "config", None)
    payload = {
        "format": CHECKPOINT_FORMAT,
        "model": model.state_dict(),
        "config": asdict(config) if config is not None else None,
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "extra": extra,
    }
    checkpoints.write_atomically(path, payload)
    return path


_PLAIN = (type(None), bool, int, float, str, Tensor)


def _check_plain(where: str, value, name: str) -> None:
    """Refuse what ``torch.load(weights_only=True)`` could not read back, naming where it is."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"save_checkpoint({where}...): dictionary keys must be strings or ints, "
                                f"got {type(k).__name__} {k!r}")
            _check_plain(f"{where}[{k!r}]", v, name)
    elif isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        for i, v in enumerate(value):
            _check_plain(f"{where}[{i}]", v, name)
    elif type(value) not in _PLAIN and not isinstance(value, Tensor):
        if is_dataclass(value) and not isinstance(value, type):
            fix = f"its fields, e.g. {name}=dataclasses.asdict({name})"
        elif hasattr(value, "item") and hasattr(value, "dtype"):  # a NumPy scalar or array
            fix = "a Python number (float(...), int(...)) or a tensor (torch.as_tensor(...))"
        else:
            fix = "plain values: numbers, strings, None, tensors, and lists, tuples and dicts of them"
        raise TypeError(f"save_checkpoint({where}...) got a {type(value).__module__}.{type(value).__qualname__}: "
                        f"load_checkpoint reads only plain values (it never unpickles code), so save {fix}")


def load_checkpoint(path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict:
    """Load weights (and optimizer state) saved by :func:`save_checkpoint` into ``model``; returns ``extra``.

    ``path`` may also be a checkpoint folder that ``tl.train`` wrote (``checkpoint_dir/step-00000100``,
    sharded by FSDP or not), or the ``checkpoint_dir`` itself (its latest checkpoint); then the
    returned dict holds the training state (``step``, ``history``, ...). ``weights_only=True``: a
    checkpoint can hold tensors and plain values only, never code.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    if path.is_dir():
        return _load_training_checkpoint(path, model, optimizer)
    payload = _read_checkpoint(path)
    config = getattr(model, "config", None)
    if config is not None and payload["config"] is not None and payload["config"] != asdict(config):
        diff = {k: (v, payload["config"].get(k)) for k, v in asdict(config).items() if payload["config"].get(k) != v}
        raise ValueError(f"{path} was saved from a model with a different config: (model, checkpoint) = {diff}")
    try:
        model.load_state_dict(payload["model"])
    except RuntimeError as e:
        raise ValueError(f"{path} does not fit this {type(model).__name__}: {e}") from None
    if optimizer is not None:
        if payload["optimizer"] is None:
            raise ValueError(f"{path} holds no optimizer state (it was saved without optimizer=...): "
                             "call load_checkpoint(path, model) and start the optimizer afresh")
        optimizer.load_state_dict(payload["optimizer"])
    return payload["extra"]


def _read_checkpoint(path: Path) -> dict:
    """``torch.load`` of a :func:`save_checkpoint` file, with an error that names the file and the fix."""
    import pickle

    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(e))
        what = f" (a {found.group(1)})" if found else ""
        raise ValueError(
            f"{path} holds a pickled Python object{what}, as torch.save(model) writes, not a checkpoint of "
            "tl.save_checkpoint. load_checkpoint never unpickles code (weights_only=True). If you trust the file, "
            f"torch.load({str(path)!r}, weights_only=False) returns the object; save with "
            "tl.save_checkpoint(path, model) from now on.") from None
    except (RuntimeError, OSError, EOFError, ValueError) as e:
        if isinstance(e, (PermissionError, IsADirectoryError)):
            raise
        raise ValueError(
            f"{path} is damaged: it is not a complete checkpoint ({type(e).__name__}: {e}). It may have been cut "
            "off while being written or copied; save it again, or load an earlier checkpoint.") from None
    if isinstance(payload, dict) and payload and all(isinstance(v, Tensor) for v in payload.values()):
        raise ValueError(
            f"{path} holds a bare state dict (torch.save(model.state_dict()) writes one), not a checkpoint of "
            "tl.save_checkpoint, which keeps the model's config and the optimizer with the weights. Load it with "
            f"model.load_state_dict(torch.load({str(path)!r}, weights_only=True)); save with "
            "tl.save_checkpoint(path, model, optimizer) from now on.")
    if not isinstance(payload, dict) or not {"model", "config", "optimizer", "extra"} <= payload.keys():
        keys = f"keys {sorted(map(str, payload))[:8]}" if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"{path} is not a checkpoint of tl.save_checkpoint (it holds {keys}; a checkpoint has "
                         "model, config, optimizer and extra)")
    if payload.get("format", 1) > CHECKPOINT_FORMAT:
        raise ValueError(f"{path} was written in checkpoint format {payload['format']}, by a newer transformer_lib "
                         f"than this one (format {CHECKPOINT_FORMAT}): upgrade the library to load it")
    return payload


def _load_training_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> dict:
    """A folder that ``tl.train`` wrote: one checkpoint, or ``checkpoint_dir`` (its latest)."""
    if not (path / "trainer.pt").exists():
        latest = checkpoints.latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"{path} is a folder with no checkpoint of tl.train in it (no step-NNNNNNNN "
                                    "folder with a trainer.pt; .partial folders are incomplete)")
        path = latest
    trainer = checkpoints._read(path / "trainer.pt", "the training state")
    if (path / "dcp").is_dir():
        checkpoints._check_model_config(path, trainer.get("model_config"), model)
        checkpoints.load_sharded(path / "dcp", model, optimizer)
    else:
        load_checkpoint(path / "model.pt", model, optimizer)
    return {k: trainer[k] for k in ("step", "history", "train_loss", "val_loss", "world_size", "parallel")}
