"""Input validation shared by every module: errors that name the argument and its allowed range.

The library's documented errors: ``TypeError`` for an argument of the wrong kind (a list where a
tensor goes, integer ids where float vectors go), ``ValueError`` for a value outside what is allowed
(a shape, a range, a setting that contradicts another), ``FileNotFoundError`` for a missing file.
Each message names the argument, the value it got and what is allowed, and where a habit from
nanoGPT or Hugging Face explains the slip, the library's way. Nothing else is raised on purpose;
anything else from a public function is a bug (``tests/test_properties.py`` looks for them).

Checks on the hot path (every forward pass) cost a type and a dtype comparison; the slower
diagnosis runs only once something is wrong.
"""

from __future__ import annotations

import math
import numbers
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

import torch
from torch import Tensor

_HOT_PATH: ContextVar[bool] = ContextVar("transformer_lib_hot_path", default=False)


@contextmanager
def hot_path() -> Iterator[None]:
    """Inside, value checks never make the CPU wait for a GPU (``tl.train`` runs its steps inside).

    Checking that token ids are in the vocabulary means reading two numbers back from the device.
    On the CPU that is free; on a GPU it is a *sync*: the CPU stops queueing work until the GPU
    has caught up, every forward pass. In the hot path such checks become asynchronous device-side
    asserts: bad ids still stop the program, with a less readable error. Outside it, and always on
    the CPU, the error names the argument and the offending id.
    """
    token = _HOT_PATH.set(True)
    try:
        yield
    finally:
        _HOT_PATH.reset(token)


def check_int(name: str, value, *, low: int | None = None, high: int | None = None) -> None:
    """Raise unless ``low <= value <= high`` for an ``int`` (bools are rejected)."""
    # (a SymInt is the int that torch.export traces a dynamic length with)
    if not isinstance(value, (numbers.Integral, torch.SymInt)) or isinstance(value, bool):
        whole = isinstance(value, float) and value.is_integer()
        hint = f" (int({value!r}) = {int(value)})" if whole else ""
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}{hint}")
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")


def is_real(value) -> bool:
    """A plain number (Python or NumPy), not a bool, a string or a tensor."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_prob(name: str, value: float) -> None:
    """A dropout-style probability in [0, 1)."""
    if not is_real(value):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__} {value!r}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")


def check_real(name: str, value, *, low: float | None = None, high: float | None = None) -> None:
    """A finite plain number in ``[low, high]`` (either bound may be None)."""
    if not is_real(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    lo = -math.inf if low is None else low
    hi = math.inf if high is None else high
    if not (lo <= value <= hi and math.isfinite(value)):  # (NaN fails every comparison)
        raise ValueError(f"{name} must be a finite number in [{lo}, {hi}], got {value!r}")


def check_positive(name: str, value: float) -> None:
    if not is_real(value):
        raise TypeError(f"{name} must be a number > 0, got {type(value).__name__} {value!r}")
    if not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")


def check_divisible(d_model: int, n_heads: int) -> None:
    if d_model % n_heads != 0:
        raise ValueError(
            f"d_model ({d_model}) must be divisible by n_heads ({n_heads}): "
            f"each head gets d_model / n_heads dimensions"
        )


def check_token_ids(
    name: str, ids: Tensor, vocab_size: int | None = None, n_ctx: int | None = None, offset: int = 0
) -> None:
    """``ids`` must be a ``(batch, seq)`` tensor of int64/int32 ids, in ``[0, vocab_size)`` if given.

    ``offset`` is the number of positions already in a KV cache; ``offset + seq`` must fit in ``n_ctx``.
    The vocabulary check reads the smallest and largest id back (free on the CPU, a sync on a GPU);
    models leave it to the embedding, which does it once. Under :func:`hot_path` on a GPU, and
    inside ``torch.compile`` (a graph cannot branch on tensor values), it is a device-side assert.
    """
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}"
                        + tensor_hint(ids, "torch.tensor([ids])"))
    if ids.dtype not in (torch.int64, torch.int32):
        hint = "; ids are whole numbers: .long() converts them" if ids.is_floating_point() else ""
        raise TypeError(f"{name} must hold integer token ids (torch.long or torch.int32), "
                        f"got dtype {ids.dtype}{hint}")
    if ids.dim() != 2:
        hint = f": one sequence is a batch of one, {name}[None]" if ids.dim() == 1 else ""
        raise ValueError(f"{name} must have shape (batch, seq), got shape {tuple(ids.shape)}{hint}")
    if ids.shape[1] == 0:
        raise ValueError(f"{name} must contain at least one token, got shape {tuple(ids.shape)}")
    if n_ctx is not None and offset + ids.shape[1] > n_ctx:
        where = f" ({offset} cached + {ids.shape[1]} new)" if offset else ""
        raise ValueError(
            f"sequence length {offset + ids.shape[1]}{where} is longer than the context: "
            f"{name} may have at most n_ctx={n_ctx} positions; crop the input to its last {n_ctx} tokens"
        )
    if vocab_size is not None and ids.numel():
        if torch.compiler.is_compiling() or torch.compiler.is_exporting() or (
                ids.device.type != "cpu" and _HOT_PATH.get()):
            in_range = ((ids >= 0) & (ids < vocab_size)).all()
            torch._assert_async(in_range, f"{name} contains a token id outside the vocabulary [0, {vocab_size - 1}]")
            return
        lo, hi = torch.aminmax(ids)
        lo, hi = int(lo), int(hi)
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{name} contains token id {bad}, outside the vocabulary [0, {vocab_size - 1}]")


def check_padding_mask(name: str, mask: Tensor | None, shape: tuple[int, int],
                       device: torch.device | None = None) -> Tensor | None:
    """A ``(batch, seq)`` padding mask: bool, or integers 0/1 as Hugging Face tokenizers return.

    ``device``: where the ids are (the mask must be there too). Returns it as bool (True = real
    token) or None.
    """
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.is_floating_point() or mask.is_complex():
        raise TypeError(f"{name} must be bool or integer (1 = token, 0 = padding), got dtype {mask.dtype}")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape (batch, seq) = {tuple(shape)}, got {tuple(mask.shape)}")
    if device is not None:
        check_same_device(name, mask, device, "input_ids")
    if mask.dtype != torch.bool:
        if ((mask != 0) & (mask != 1)).any():
            raise ValueError(f"{name} must contain only 0 (padding) and 1 (token)")
        mask = mask.bool()
    return mask


def tensor_hint(value, example: str = "torch.tensor(value)") -> str:
    """For a list, tuple or NumPy array where a tensor belongs: how to make one."""
    if isinstance(value, (list, tuple)) or type(value).__module__ == "numpy":
        return f"; make one with {example}"
    return ""


def check_float_input(name: str, x, weight: Tensor) -> None:
    """``x`` must be a floating-point tensor of ``weight``'s dtype (any floating dtype under autocast).

    The hot path is a type and a dtype comparison; :func:`_float_mismatch` says what is wrong.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of {weight.dtype} vectors, got {type(x).__name__}"
                        + tensor_hint(x, "torch.tensor(x, dtype=torch.float32)"))
    if x.dtype != weight.dtype:
        _float_mismatch(name, x, weight.dtype)


def _float_mismatch(name: str, x: Tensor, dtype: torch.dtype) -> None:
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must hold floating-point numbers ({dtype}, the layer's weights), got dtype {x.dtype}: "
            f"convert with {name}.float() (torch.tensor([[1, 2]]) makes integers; token ids go through "
            "an embedding first)")
    if torch.is_autocast_enabled(x.device.type):
        return  # mixed precision: autocast chooses each operation's dtype
    raise TypeError(
        f"{name} has dtype {x.dtype} but the layer's weights are {dtype}: convert the input with "
        f"{name}.to({dtype}), or the layer with .to({x.dtype})")


def check_float_tensors(names: str, *tensors) -> None:
    """Tensors that compute together (``q, k, v``): floating-point, one dtype, one device."""
    for name, t in zip(names.split(", "), tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}" + tensor_hint(t))
        if not t.is_floating_point():
            raise TypeError(f"{name} must hold floating-point numbers, got dtype {t.dtype}: "
                            f"convert with {name}.float()")
    first = tensors[0]
    if any(t.dtype != first.dtype for t in tensors) and not torch.is_autocast_enabled(first.device.type):
        got = ", ".join(str(t.dtype) for t in tensors)
        raise TypeError(f"{names} must share one dtype, got {got}: convert them with .float()")
    if any(t.device != first.device for t in tensors):
        got = ", ".join(str(t.device) for t in tensors)
        raise ValueError(f"{names} must be on one device, got {got}")


def check_same_device(name: str, tensor: Tensor | None, device: torch.device,
                      where: str = "the input") -> None:
    """``tensor`` (a mask, the targets) must be on ``device``, where ``where`` is."""
    if tensor is not None and tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device} but {where} is on {device}: "
                         f"move it with {name}.to({str(device)!r})")


def check_finite_weights(model: torch.nn.Module, doing: str) -> None:
    """Refuse a model with NaN or infinite weights, naming the first such parameters: training diverged."""
    params = [(n, p) for n, p in model.named_parameters()]
    if not params:
        return
    finite = torch.stack([p.detach().isfinite().all() for _, p in params])
    if bool(finite.all()):
        return
    bad = [n for (n, _), ok in zip(params, finite.tolist()) if not ok]
    shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
    raise ValueError(
        f"cannot {doing}: the model's weights are not finite (NaN or inf in {shown}). Training diverged: "
        "train again with a lower lr, a longer warm-up or gradient clipping (TrainConfig(grad_clip=1.0)), "
        "or load the last good checkpoint")


def check_finite_logits(logits: Tensor, model: torch.nn.Module | None = None) -> None:
    """Logits must be finite: NaN would make argmax pick token 0 and sampling fail."""
    if bool(logits.isfinite().all()):
        return
    if model is not None:
        check_finite_weights(model, "generate")  # raises if the weights are the cause
    if model is None:
        raise ValueError("logits are not finite (NaN or inf): if they are a model's output, check that its "
                         "weights are finite (a diverged training run leaves NaN)")
    raise ValueError("the model's logits are not finite (NaN or inf) although its weights are: "
                     "an activation overflowed (float16?); run the model in float32 or bfloat16")


def check_same_shape(name: str, value, like: Tensor, dtype: torch.dtype | None = None,
                     like_name: str = "input_ids") -> None:
    """``value`` must be a tensor shaped as ``like`` (of ``dtype`` if given): labels, token types, masks."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}" + tensor_hint(value))
    if dtype is not None and value.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {value.dtype}")
    if value.shape != like.shape:
        raise ValueError(f"{name} must have the shape of {like_name} {tuple(like.shape)}, "
                         f"got {tuple(value.shape)}")


def check_id_sequence(name: str, ids) -> None:
    """A 1-D tensor of integer token ids: the whole text, as ``torch.tensor(tok.encode(text))``."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a 1-D torch.Tensor of token ids, got {type(ids).__name__}"
                        + tensor_hint(ids, "torch.tensor(tok.encode(text))"))
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got dtype {ids.dtype} (floats would be cut "
                        "to whole numbers; torch.randint makes random ids, torch.rand makes floats)")
    if ids.dim() != 1:
        hint = (": it is one long sequence, the whole text (a 2-D batch of ids: flatten it)"
                if ids.dim() == 2 else "")
        raise ValueError(f"{name} must be a 1-D tensor of token ids, got shape {tuple(ids.shape)}{hint}")


def check_betas(betas) -> tuple[float, float]:
    """Adam's ``(beta1, beta2)``, each in [0, 1); returned as a tuple (a list is accepted)."""
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        got = f"{type(betas).__name__} {betas!r}"
        raise TypeError(f"betas must be a pair (beta1, beta2), got {got}: e.g. betas=(0.9, 0.95), "
                        "the decay rates of Adam's two moving averages")
    for name, value in zip(("betas[0]", "betas[1]"), betas):
        check_real(name, value, low=0.0)
        if not value < 1:
            raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return tuple(betas)


def check_schedule_reaches_its_peak(max_steps: int, warmup_steps: int) -> None:
    """The learning rate rises for ``warmup_steps`` steps, then decays: the warm-up must end first."""
    if warmup_steps >= max_steps:
        peak = f" (it would end at {max_steps / warmup_steps:.0%} of lr)" if warmup_steps > max_steps else ""
        raise ValueError(
            f"warmup_steps={warmup_steps} must be less than max_steps={max_steps}: the learning rate rises "
            f"for warmup_steps steps, so it would still be rising at the last step{peak} and never decay. "
            f"Pass warmup_steps={max_steps // 10} (a tenth of max_steps), or leave it out (None does that)")


def check_device(device, name: str = "device") -> torch.device | None:
    """None (choose automatically) or a device this machine has: 'cpu', 'cuda', 'cuda:1', 'mps'."""
    if device is None:
        return None
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"{name} must be a str such as 'cpu' or 'cuda', a torch.device or None, "
                        f"got {type(device).__name__} {device!r}")
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise ValueError(f"{name} must be 'cpu', 'cuda', 'cuda:N', 'mps' or None (the best there is), "
                         f"got {device!r}") from None
    where = "In Colab: Runtime > Change runtime type > GPU. Or leave it out: None picks the best there is"
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}={device!r}, but PyTorch sees no CUDA GPU here "
                             f"(torch.cuda.is_available() is False: no GPU, or a CPU-only PyTorch). {where}")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ValueError(f"{name}={device!r}, but this machine has {torch.cuda.device_count()} GPU(s): "
                             f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    mps = getattr(torch.backends, "mps", None)
    if parsed.type == "mps" and not (mps is not None and mps.is_available()):
        raise ValueError(f"{name}={device!r}, but Apple's MPS is not available here. {where}")
    return parsed


def describe(value) -> str:
    """A short description of a value for an error message: its type, and a tensor's shape."""
    if isinstance(value, Tensor):
        return f"one tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(f"shape {tuple(v.shape)}" if isinstance(v, Tensor) else type(v).__name__
                          for v in value[:3])
        return f"a {type(value).__name__} of {len(value)} ({inner})"
    return f"a {type(value).__name__}"


def check_train_arguments(model, train_batches, val_batches, config, loss_fn, callbacks) -> None:
    """``tl.train``'s arguments, with the library's way where a nanoGPT or PyTorch habit explains a slip."""
    from torch import nn

    from .config import TransformerConfig
    from .training import Callback, TrainConfig

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module such as tl.GPT2(config), "
                        f"got {type(model).__name__}")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"model ({type(model).__name__}) has no trainable parameters")
    for name, batches in (("train_batches", train_batches), ("val_batches", val_batches)):
        if batches is None and name == "val_batches":
            continue
        if isinstance(batches, Tensor):
            raise TypeError(
                f"{name} must be a function that returns a batch, got {describe(batches)}. nanoGPT's "
                "loop takes the token ids; here a sampler draws the batches from them: "
                "tl.train(model, tl.BatchSampler(train_ids, batch_size, block_size), "
                "tl.BatchSampler(val_ids, batch_size, block_size), config)")
        if not callable(batches):
            iterable = hasattr(batches, "__iter__")
            hint = (": a DataLoader or a list is iterated, not called; wrap it, e.g. "
                    "it = iter(loader); train_batches=lambda: next(it)" if iterable else "")
            raise TypeError(f"{name} must be a function that returns a batch (called once per step), "
                            f"got {describe(batches)}{hint}")
    if config is not None and not isinstance(config, TrainConfig):
        if isinstance(config, TransformerConfig):
            hint = (f": that is the model's configuration (the model keeps it as model.config). "
                    "The fourth argument is the training's: tl.TrainConfig(max_steps=..., lr=...)")
        elif isinstance(config, dict):
            hint = ": build one from the dict, tl.TrainConfig(**settings)"
        else:
            hint = ""
        raise TypeError(f"config must be a tl.TrainConfig, got {type(config).__name__}{hint}")
    if isinstance(loss_fn, nn.Module) or isinstance(getattr(loss_fn, "__self__", None), nn.Module):
        raise TypeError(
            f"loss_fn is called as loss_fn(model, batch) and returns the loss, got {describe(loss_fn)} "
            f"({getattr(loss_fn, '__qualname__', type(loss_fn).__name__)}), which takes other arguments. "
            "The default calls model.loss(*batch) (a dict batch: model.mlm_loss(**batch)): leave "
            "loss_fn out, or pass lambda model, batch: ...")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be a function loss_fn(model, batch) -> loss, got {describe(loss_fn)}")
    hooks = ("on_train_start", "on_eval", "on_step", "on_train_end")
    if isinstance(callbacks, Callback) or all(hasattr(callbacks, h) for h in hooks):
        raise TypeError(f"callbacks must be a list of callbacks, got a single {type(callbacks).__name__}: "
                        f"pass callbacks=[{type(callbacks).__name__}(...)]")
    if not isinstance(callbacks, (list, tuple)):
        raise TypeError(f"callbacks must be a list of tl.Callback objects, got {describe(callbacks)}")
    for i, cb in enumerate(callbacks):
        if isinstance(cb, type):
            raise TypeError(f"callbacks[{i}] is the class {cb.__name__}; pass an instance, "
                            f"{cb.__name__}(...)")
        missing = [h for h in hooks if not callable(getattr(cb, h, None))]
        if missing:
            raise TypeError(f"callbacks[{i}] must be a tl.Callback (subclass it), got {type(cb).__name__} "
                            f"without {', '.join(missing)}")
