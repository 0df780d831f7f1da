"""Data parallelism under ``torchrun``: many processes, the same training as one.

Taught in chapter 12, *Scaling out* (``book/12_scaling_out.ipynb``).

    torchrun --nproc_per_node=N train.py        # N processes ("ranks"), one per GPU (or CPU share)

The script is the one-process script with ``TrainConfig(parallel="ddp")`` or ``"fsdp"``. Every
rank calls the same batch function, so every rank sees the same global batch of ``B`` examples,
and takes its own slice of ``B / N`` of them. Its gradient is the gradient of the mean loss over
its slice; the all-reduce averages the ``N`` gradients, and the mean of the slices' gradients is
the gradient of the mean loss over the whole batch (the slices are equal, the loss is a mean, and
the gradient is linear). Every rank then takes the same optimizer step that one process would
take on the whole batch, and the model stays the same on every rank.

* ``"ddp"``: ``DistributedDataParallel``. Every rank holds the whole model and optimizer; the
  gradients are all-reduced in buckets while the backward pass is still running.
* ``"fsdp"``: FSDP2, ``torch.distributed.fsdp.fully_shard`` (ZeRO stage 3). Each rank keeps
  ``1/N`` of every parameter, gradient and AdamW state; a block's parameters are all-gathered
  just before its forward (and backward) pass and freed after it, and its gradients are
  reduce-scattered, so each rank ends up with the averaged gradient of its own shard.

The backend follows the device: NCCL between GPUs, gloo between CPU processes.
"""

from __future__ import annotations

import atexit
import inspect
import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn

PARALLEL = ("ddp", "fsdp")
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
Batch = Any  # a tensor, a tuple of tensors, or a dict of tensors: examples along dimension 0


class LaunchError(RuntimeError):
    """The processes were not started the way ``TrainConfig(parallel=...)`` needs."""


def launched_by_torchrun() -> bool:
    """Whether this process is one of the processes that ``torchrun`` started (it sets these variables)."""
    return all(name in os.environ for name in TORCHRUN_VARIABLES)


def split_batch(batch: Batch, parts: int, why: str) -> list[Batch]:
    """``batch`` cut into ``parts`` equal slices of its examples (views, no copies).

    Every tensor in the batch is cut along dimension 0; anything else is passed to every slice.
    ``why`` names what asks for the split, for the error when the examples do not divide equally.
    """
    if parts == 1:
        return [batch]
    sizes = {t.shape[0] for t in _tensors(batch) if t.dim() > 0}
    if len(sizes) != 1:
        found = "no tensors" if not sizes else f"first dimensions {sorted(sizes)}"
        raise ValueError(f"{why} splits each batch along its first dimension (the examples), so every "
                         f"tensor in the batch needs the same first dimension; this batch has {found}")
    n = sizes.pop()
    if n % parts:
        raise ValueError(f"{why}: the batch has {n} examples, which do not split into {parts} equal parts. "
                         f"Make the batch size a multiple of {parts}.")
    size = n // parts
    return [_map(batch, lambda t: t[i * size:(i + 1) * size] if t.dim() > 0 else t) for i in range(parts)]


def _tensors(batch: Batch) -> list[Tensor]:
    if isinstance(batch, Tensor):
        return [batch]
    if isinstance(batch, dict):
        return [t for v in batch.values() for t in _tensors(v)]
    if isinstance(batch, (tuple, list)):
        return [t for v in batch for t in _tensors(v)]
    return []


def _map(batch: Batch, fn: Callable[[Tensor], Tensor]) -> Batch:
    if isinstance(batch, Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return {k: _map(v, fn) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_map(v, fn) for v in batch)
    return batch


class LossModule(nn.Module):
    """``loss_fn(model, batch)`` as a module.

    DDP and FSDP act through a module's ``forward``: DDP prepares the gradient all-reduce there, FSDP
    gathers the parameters. ``model.loss(...)`` is not ``model.forward``, so the wrapper's forward
    computes the whole loss, and everything the loss touches is inside it.
    """

    def __init__(self, model: nn.Module, loss_fn: Callable[..., Tensor]) -> None:
        super().__init__()
        self.model, self.loss_fn = model, loss_fn
        self.inside = False  # True while forward runs (FSDP's guard reads it)

    def forward(self, batch: Batch, **kwargs) -> Tensor:
        self.inside = True
        try:
            return self.loss_fn(self.model, batch, **kwargs)
        finally:
            self.inside = False


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The library's blocks in ``model`` (FSDP shards each into its own group), outermost first."""
    from .layers.block import DecoderBlock, TransformerBlock

    return [m for m in model.modules() if isinstance(m, (TransformerBlock, DecoderBlock))]


@dataclass
class Parallel:
    """This process's place in a run: rank ``rank`` of ``world_size``, its device, and how it shares the work.

    Without torchrun it is rank 0 of 1 and every method does nothing: one process trains as before.
    """

    kind: str | None  # None, "ddp" or "fsdp"
    device: torch.device
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    _wrapped: nn.Module | None = None

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that logs, draws and saves."""
        return self.rank == 0

    def shard(self, batches: Callable[[], Batch]) -> Callable[[], Batch]:
        """This rank's share of every batch: slice ``rank`` of ``world_size`` equal slices."""
        if self.world_size == 1:
            return batches
        why = (f"TrainConfig(parallel={self.kind!r}) gives each of the {self.world_size} processes an equal "
               f"share of every batch (world size {self.world_size})")

        def my_share() -> Batch:
            return split_batch(batches(), self.world_size, why)[self.rank]

        return my_share

    def wrap(self, model: nn.Module, loss_fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
        """Wrap ``model`` for this run; returns the loss function that training and evaluation call.

        The returned ``loss(model, batch)`` runs ``loss_fn`` through DDP or FSDP (its ``model``
        argument is the wrapped model, kept for the signature). One process: ``loss_fn`` itself.
        """
        if self.kind is None:
            return loss_fn
        module = LossModule(model, loss_fn)
        if self.kind == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            # the buffers are constants (masks, RoPE tables): no broadcast before every forward
            new_name = "forward_sync_buffers" in inspect.signature(DDP).parameters  # torch >= 2.13
            buffers = {"forward_sync_buffers": False} if new_name else {"broadcast_buffers": False}
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            # gradient_as_bucket_view: the gradients live in the all-reduce buckets, not in a copy beside them
            self._wrapped = DDP(module, device_ids=device_ids, gradient_as_bucket_view=True, **buffers)
        else:
            self._wrapped = shard_model(module, self.device, self.world_size)
            model.register_forward_pre_hook(self._fsdp_guard(module), prepend=True)

        def parallel_loss(_model: nn.Module, batch: Batch, **kwargs) -> Tensor:
            return self._wrapped(batch, **kwargs)

        parallel_loss.__signature__ = inspect.signature(loss_fn)  # TrainStep looks for label_smoothing
        return parallel_loss

    def _fsdp_guard(self, module: LossModule) -> Callable:
        world = self.world_size

        def guard(model: nn.Module, args) -> None:
            if not module.inside:
                raise RuntimeError(
                    f"this model is sharded across {world} processes by TrainConfig(parallel='fsdp'): "
                    f"each holds 1/{world} of every parameter, so it cannot run on its own (a callback runs "
                    "on rank 0 only). Gather it on every rank with tl.distributed.full_state_dict(model), "
                    "or load its checkpoint into an unsharded model in one process "
                    "(tl.load_checkpoint(folder, model)).")

        return guard

    def no_sync(self, sync: bool) -> ContextManager:
        """Around a micro-step of gradient accumulation: ``sync=False`` keeps the gradients local.

        The all-reduce (DDP) or reduce-scatter (FSDP) then runs once, on the last micro-step, on the
        gradients summed over all of them.
        """
        if sync or self._wrapped is None:
            return nullcontext()
        if self.kind == "ddp":
            return self._wrapped.no_sync()
        return _fsdp_no_sync(self._wrapped)

    def average(self, value: float) -> float:
        """The mean of ``value`` over the ranks (every rank gets it)."""
        if self.world_size == 1:
            return value
        t = torch.tensor(float(value), dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.item() / self.world_size

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier(device_ids=[self.device.index]) if self.device.type == "cuda" else dist.barrier()

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` (any picklable object) on every rank."""
        if self.world_size == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, device=self.device if self.device.type == "cuda" else None)
        return box[0]


@contextmanager
def _fsdp_no_sync(module: nn.Module) -> Iterator[None]:
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def shard_model(module: nn.Module, device: torch.device, world_size: int) -> nn.Module:
    """FSDP2: each transformer block its own group, the rest (embeddings, final norm, head) the root's.

    A block's parameters are gathered only while it computes. Tied tensors (GPT-2's embedding and
    head) stay together in the root group. Rank 0's weights are broadcast first, so every rank
    shards the same model, as DDP does when it wraps.
    """
    from torch.distributed.device_mesh import init_device_mesh

    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch 2.5
        from torch.distributed._composable.fsdp import fully_shard

    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor, src=0)
    mesh = init_device_mesh(device.type, (world_size,))
    for block in transformer_blocks(module):
        fully_shard(block, mesh=mesh)
    return fully_shard(module, mesh=mesh)


def full_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The whole model's weights on rank 0's CPU (other ranks get ``{}``); call it on every rank.

    For a model sharded by ``parallel="fsdp"`` it gathers the shards; otherwise it is ``model.state_dict()``.
    """
    if not any(_is_dtensor(p) for p in model.parameters()):
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _is_dtensor(t: Tensor) -> bool:
    return type(t).__name__ == "DTensor" or hasattr(t, "device_mesh")


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model``'s parameters are FSDP shards (DTensors)."""
    return any(_is_dtensor(p) for p in model.parameters())


def start(kind: str | None, device: str | None) -> Parallel:
    """This process's :class:`Parallel`: the process group joined (or created) when ``kind`` is set.

    Raises :class:`LaunchError` for launches that cannot work: ``parallel`` set but no torchrun, torchrun
    with several processes but ``parallel=None`` (each would train its own copy), more processes
    on a node than it has GPUs, or a device with no distributed backend.
    """
    from .training import auto_device

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if dist.is_initialized():
        world_size = dist.get_world_size()
    if kind is None:
        if world_size > 1 and (launched_by_torchrun() or dist.is_initialized()):
            raise LaunchError(
                f"this process is one of {world_size} that torchrun started, but TrainConfig(parallel=None) "
                "would make each of them train its own copy of the model on the same batches. Set "
                "TrainConfig(parallel='ddp') (or 'fsdp') to share the work, or run the script with python "
                "alone.")
        return Parallel(None, torch.device(device) if device else auto_device())
    if not (launched_by_torchrun() or dist.is_initialized()):
        raise LaunchError(
            f"TrainConfig(parallel={kind!r}) trains with one process per device, started by torchrun, and "
            "this process was not (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT are not all "
            "set). Launch the script with `torchrun --nproc_per_node=2 train.py` (one process per GPU), or "
            "leave parallel=None to train in this process. From a notebook: write the training into a script "
            "and run it with !torchrun (chapter 12).")
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    place = _device_for_rank(device, local_rank, auto_device())
    if not dist.is_initialized():
        backend = "nccl" if place.type == "cuda" else "gloo"
        dist.init_process_group(backend, store=_attempt_store(world_size), rank=rank, world_size=world_size,
                                **({"device_id": place} if place.type == "cuda" else {}))
        atexit.register(_leave)
    return Parallel(kind, place, rank, world_size, local_rank)


def _device_for_rank(device: str | None, local_rank: int, auto: torch.device) -> torch.device:
    place = torch.device(device) if device else auto
    if place.type == "cuda":
        count = torch.cuda.device_count()
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        if place.index is None:
            if local_rank >= count:
                raise LaunchError(
                    f"torchrun started {local_world} processes on this node, which has {count} GPU(s): one "
                    f"process per GPU, so use --nproc_per_node={count} (or TrainConfig(device='cpu') for "
                    "processes on CPU cores, with the gloo backend)")
            place = torch.device("cuda", local_rank)
        torch.cuda.set_device(place)
    elif place.type != "cpu":
        raise LaunchError(f"parallel training runs on CUDA GPUs (NCCL) or on CPUs (gloo); device "
                          f"{str(place)!r} has no distributed backend: use TrainConfig(device='cpu') or a "
                          "CUDA GPU")
    return place


def _attempt_store(world_size: int) -> dist.Store:
    """torchrun's key-value store, under a prefix of its own for each time torchrun has started the processes.

    After a failure, ``torchrun --max-restarts=N`` starts every process again against the same store;
    the process group's keys (each rank's address) from the attempt before are still there, and a
    rank that reads one connects to a process that no longer exists. A prefix per attempt keeps them apart.
    """
    host = int(os.environ["RANK"]) == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                          is_master=host, multi_tenant=host)
    return dist.PrefixStore(f"tfs/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def _leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def check_parallel(parallel: str | None) -> None:
    if parallel is not None and parallel not in PARALLEL:
        raise ValueError(f"parallel must be None (one process), 'ddp' or 'fsdp', got {parallel!r}")
