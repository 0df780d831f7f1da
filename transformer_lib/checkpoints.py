"""Resumable training: a run killed at any moment starts again where its last checkpoint was, step for step.

Taught in chapter 12, *Scaling out* (``book/12_scaling_out.ipynb``).

With ``TrainConfig(checkpoint_dir="ckpt", checkpoint_every=100)``, :func:`~transformer_lib.train`
writes every 100 steps (and after the last one)::

    ckpt/step-00000100/
        model.pt         weights, model config and AdamW state (tl.load_checkpoint reads it): one process, DDP
        dcp/             the same, sharded: each rank writes its shards (FSDP; torch.distributed.checkpoint)
        trainer.pt       step, evaluations so far, the loss scaler, the data position, the TrainConfig
        rng-0.pt, ...    each rank's random number generators: torch (CPU, CUDA), Python's, NumPy's

Everything is written into ``.step-00000100.partial`` first; when every rank has finished, the
folder is renamed, in one atomic step, to ``step-00000100``. A run killed while it writes leaves a
``.partial`` folder, which is never read (the next save of that step replaces it). The two latest
checkpoints are kept. Launched again with the same config, ``train`` continues from the latest
complete checkpoint: weights, optimizer, position in the schedule, every random number generator,
and the data: each batch function is called again as many times as before (its draws are discarded),
which brings any seeded sampler to where it was. Then the losses are the same, step for step, as
those of a run never interrupted.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from .distributed import Parallel, is_sharded

CHECKPOINT = re.compile(r"^step-(\d{8})$")
KEEP = 2  # complete checkpoints kept: the latest, and one before it
# TrainConfig fields that may differ on resuming: they change where and how fast, not what is computed
# (parallel too: every world size and kind trains on the same global batches)
MAY_DIFFER = ("progress", "device", "compile", "parallel", "checkpoint_dir", "checkpoint_every")


class Draws:
    """A batch function that counts its calls, so that a resumed run can call it as often again."""

    def __init__(self, batches: Callable[[], Any]) -> None:
        self.batches, self.count = batches, 0

    def __call__(self) -> Any:
        self.count += 1
        return self.batches()

    def replay(self, count: int) -> None:
        """Draw (and discard) batches until ``count`` have been drawn."""
        while self.count < count:
            self()


def write_atomically(path: Path, obj: Any) -> None:
    """``torch.save`` into a temporary file beside ``path``, flushed to disk, then renamed to ``path``.

    A rename within a folder is atomic: ``path`` is the old file or the whole new one, never a part.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX; elsewhere a no-op)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def checkpoints_in(folder: str | Path) -> list[Path]:
    """The complete checkpoints in ``folder``, oldest first (``.partial`` folders are not)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and CHECKPOINT.match(p.name)]
    return sorted(found, key=lambda p: int(CHECKPOINT.match(p.name).group(1)))


def latest_checkpoint(folder: str | Path) -> Path | None:
    found = checkpoints_in(folder)
    return found[-1] if found else None


# ---- random number generators ------------------------------------------------------------------------

def rng_state(device: torch.device) -> dict:
    """Every generator a training step may draw from: torch's (CPU, this rank's GPU), Python's, NumPy's."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    try:
        import numpy as np
    except ImportError:
        return state
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state["numpy"] = (kind, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(gauss))
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, gauss))


# ---- sharded model and optimizer (FSDP) ------------------------------------------------------------

def save_sharded(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """``torch.distributed.checkpoint``: each rank writes its own shards, rank 0 the metadata (collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=folder)


def load_sharded(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
    """Load a :func:`save_sharded` checkpoint into ``model``: sharded or not, on any number of ranks."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    one_process = not (torch.distributed.is_available() and torch.distributed.is_initialized())
    if optimizer is None:
        state = {"model": model.state_dict()}
    else:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
    with warnings.catch_warnings():  # in one process DCP warns that it assumes one process: it is asked to
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=folder, no_dist=one_process)  # in place, into the tensors given
    if optimizer is None:
        model.load_state_dict(state["model"])
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


# ---- the training loop's checkpoints -------------------------------------------------------------

class Checkpointer:
    """What :func:`~transformer_lib.train` does for resumable runs (no ``checkpoint_dir``: count draws)."""

    def __init__(self, config, run: Parallel) -> None:
        self.config, self.run = config, run
        self.folder = Path(config.checkpoint_dir) if config.checkpoint_dir is not None else None
        self.every = config.checkpoint_every or config.eval_interval
        self.draws: dict[str, Draws] = {}

    def track(self, train_batches: Callable, val_batches: Callable | None) -> tuple[Draws, Draws | None]:
        self.draws = {"train": Draws(train_batches)}
        if val_batches is not None:
            self.draws["val"] = Draws(val_batches)
        return self.draws["train"], self.draws.get("val")

    def due(self, step: int) -> bool:
        return self.folder is not None and (step % self.every == 0 or step == self.config.max_steps)

    def save(self, state, model: nn.Module, step_fn) -> Path:
        """Write the checkpoint of ``state.step`` (every rank calls it)."""
        run, step = self.run, state.step
        final = self.folder / f"step-{step:08d}"
        partial = self.folder / f".step-{step:08d}.partial"
        if run.is_main:
            shutil.rmtree(partial, ignore_errors=True)  # a run killed while writing it
            partial.mkdir(parents=True)
        run.barrier()
        if is_sharded(model):
            save_sharded(partial / "dcp", model, step_fn.optimizer)
        elif run.is_main:
            from .training import save_checkpoint

            save_checkpoint(partial / "model.pt", model, step_fn.optimizer)
        write_atomically(partial / f"rng-{run.rank}.pt", rng_state(run.device))
        if run.is_main:
            write_atomically(partial / "trainer.pt", {
                "format": 1, "step": step, "lr": state.lr, "elapsed": state.elapsed, "history": state.history,
                "train_loss": state.train_loss, "val_loss": state.val_loss,
                "draws": {name: d.count for name, d in self.draws.items()},
                "scaler": step_fn.scaler.state_dict(), "world_size": run.world_size,
                "parallel": self.config.parallel, "config": _plain(asdict(self.config)),
                "model_config": _plain(asdict(model.config)) if hasattr(model, "config") else None,
            })
        run.barrier()  # every rank's files are on disk
        if run.is_main:
            if final.exists():
                shutil.rmtree(final)
            os.rename(partial, final)  # the checkpoint exists, whole, from this moment
            _sync_folder(self.folder)
            for old in checkpoints_in(self.folder)[:-KEEP]:
                shutil.rmtree(old, ignore_errors=True)
        run.barrier()
        return final

    def resume(self, state, model: nn.Module, step_fn) -> Path | None:
        """Continue from the latest complete checkpoint in ``checkpoint_dir``, if there is one."""
        if self.folder is None:
            return None
        path = self.run.broadcast(latest_checkpoint(self.folder))  # every rank resumes from the same one
        if path is None:
            return None
        trainer = _read(path / "trainer.pt", "the training state")
        self._check_config(path, trainer)
        if (path / "dcp").is_dir():
            _check_model_config(path, trainer.get("model_config"), model)
            load_sharded(path / "dcp", model, step_fn.optimizer)
        elif is_sharded(model):
            raise ValueError(f"{path} was written without parallel='fsdp' (one file, model.pt): resume it "
                             "with parallel=None or 'ddp'; every kind trains on the same batches")
        else:
            from .training import load_checkpoint

            load_checkpoint(path / "model.pt", model, step_fn.optimizer)
        if trainer["scaler"]:
            step_fn.scaler.load_state_dict(trainer["scaler"])
        state.step, state.lr, state.elapsed = trainer["step"], trainer["lr"], trainer["elapsed"]
        state.history = list(trainer["history"])
        state.train_loss, state.val_loss = trainer["train_loss"], trainer["val_loss"]
        for name, count in trainer["draws"].items():  # the same batches as before, then the same generators
            if name in self.draws:
                self.draws[name].replay(count)
        rng = path / f"rng-{self.run.rank}.pt"
        if rng.exists():
            set_rng_state(_read(rng, "the random number generators"), self.run.device)
        else:
            warnings.warn(f"{path} has no random-number state for rank {self.run.rank} (it was written by "
                          f"{trainer['world_size']} processes): dropout continues from a new seed",
                          stacklevel=3)
            torch.manual_seed(self.config.seed + self.run.rank + state.step)
        if self.run.is_main:
            print(f"resuming from {path} (step {state.step:,} of {self.config.max_steps:,})", flush=True)
        return path

    def _check_config(self, path: Path, trainer: dict) -> None:
        saved, now = trainer["config"], _plain(asdict(self.config))
        differ = {k: (saved.get(k), v) for k, v in now.items() if k not in MAY_DIFFER and saved.get(k) != v}
        if differ:
            shown = ", ".join(f"{k}: {a!r} then, {b!r} now" for k, (a, b) in differ.items())
            raise ValueError(
                f"{self.folder} holds a run with another TrainConfig ({shown}), so it cannot be continued "
                f"step for step. Use another checkpoint_dir to start a new run, or the same settings to "
                f"continue this one (it would resume from {path.name}).")


def _check_model_config(path: Path, saved: dict | None, model: nn.Module) -> None:
    config = getattr(model, "config", None)
    if saved is not None and config is not None and saved != _plain(asdict(config)):
        now = _plain(asdict(config))
        diff = {k: (v, saved.get(k)) for k, v in now.items() if saved.get(k) != v}
        raise ValueError(f"{path} was saved from a model with a different config: "
                         f"(model, checkpoint) = {diff}")


def _plain(value: Any) -> Any:
    """A config as plain values (tuples become lists, paths strings), which torch.load(weights_only=True)
    reads back equal."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def _read(path: Path, what: str) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing: {path.parent} is not a complete checkpoint "
                                f"(it should hold {what})") from None
    except Exception as e:
        raise ValueError(f"{path} is damaged ({type(e).__name__}: {e}); it holds {what}. Delete "
                         f"{path.parent} to resume from the checkpoint before it") from e
