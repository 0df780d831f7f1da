"""Language-modelling losses.

Taught in chapter 1, *Tokens, embeddings and logits* (cross-entropy over the vocabulary),
chapter 7, *GPT-2* (causal LM) and chapter 8, *BERT* (masked LM).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import _HOT_PATH, check_float_tensors, check_same_device, tensor_hint

IGNORE_INDEX = -100  # label value that contributes nothing to the loss (as in PyTorch and Hugging Face)


def _check_tensors(logits: Tensor, name: str, labels: Tensor) -> None:
    check_float_tensors("logits", logits)
    if not isinstance(labels, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(labels).__name__}"
                        + tensor_hint(labels, f"torch.tensor({name})"))


def _check_labels(name: str, labels: Tensor, logits: Tensor) -> None:
    """Ids in ``[0, vocab)`` or ``IGNORE_INDEX``, at least one of them an id, on the logits' device.

    One read of the smallest and largest label (on a GPU inside ``hot_path``: a device-side assert
    instead, as for token ids); the diagnosis runs only when something is out of range.
    """
    if labels.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must hold integer token ids (torch.long), got dtype {labels.dtype}"
                        + ("; .long() converts them" if labels.is_floating_point() else ""))
    check_same_device(name, labels, logits.device, "logits")
    vocab = logits.shape[-1]
    if labels.numel() == 0:
        return  # the shapes say there is nothing to predict; the callers refuse it
    if torch.compiler.is_compiling() or (labels.device.type != "cpu" and _HOT_PATH.get()):
        in_range = ((labels >= 0) & (labels < vocab)) | (labels == IGNORE_INDEX)
        ok = in_range.all() & (labels != IGNORE_INDEX).any()
        torch._assert_async(ok, f"{name} must be token ids in [0, {vocab - 1}] or IGNORE_INDEX (-100), "
                            "at least one of them an id")
        return
    lo, hi = (int(v) for v in torch.aminmax(labels))
    if lo >= 0 and hi < vocab:
        return
    if hi >= vocab:
        raise ValueError(f"{name} contains token id {hi}, outside the vocabulary [0, {vocab - 1}] "
                         "of the logits")
    other = labels[(labels < 0) & (labels != IGNORE_INDEX)]
    if other.numel():
        bad = int(other[0])
        habit = (f" nanoGPT pads targets with -1; here write "
                 f"{name}.masked_fill({name} == -1, tl.IGNORE_INDEX)." if bad == -1 else "")
        raise ValueError(f"{name} contains {bad}: a target is a token id in [0, {vocab - 1}], or "
                         "IGNORE_INDEX (-100, as in PyTorch and Hugging Face) where there is nothing to "
                         f"predict.{habit}")
    if hi == IGNORE_INDEX:
        raise ValueError(f"every entry of {name} is IGNORE_INDEX (-100): there is nothing to predict, "
                         "and the mean over no positions would be NaN. Keep at least one real target "
                         "in the batch")


def check_label_smoothing(label_smoothing: float) -> None:
    """``label_smoothing`` must be a number in ``[0, 1)``."""
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) \
            or not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must be a number in [0, 1), got {label_smoothing!r}")


def causal_lm_loss(logits: Tensor, targets: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy of predicting ``targets`` from ``logits``.

    Args:
        logits: ``(batch, seq, vocab)``, the model's output at each position.
        targets: ``(batch, seq)``, the *next* token at each position, i.e. the inputs shifted
            left by one (``inputs = tokens[:, :-1]``, ``targets = tokens[:, 1:]``);
            ``IGNORE_INDEX`` where there is nothing to predict.
        label_smoothing: ``eps``: the target distribution puts ``1 - eps`` on the right token and
            spreads ``eps`` evenly over the whole vocabulary (Szegedy et al. 2016; Vaswani et al.
            2017 train with 0.1). 0: plain cross-entropy.
    """
    _check_tensors(logits, "targets", targets)
    if logits.dim() != 3 or targets.shape != logits.shape[:2] or targets.numel() == 0:
        raise ValueError(
            f"logits must be (batch, seq, vocab) and targets (batch, seq), seq >= 1; "
            f"got {tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    _check_labels("targets", targets, logits)
    check_label_smoothing(label_smoothing)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX,
                           label_smoothing=label_smoothing)


def masked_lm_loss(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy at the masked positions only.

    ``logits``: ``(n_masked, vocab)`` (from ``BERT(..., masked_positions=...)``), ``labels``:
    ``(n_masked,)`` the original tokens there; ``label_smoothing`` as in :func:`causal_lm_loss`.
    """
    _check_tensors(logits, "labels", labels)
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(
            f"logits must be (n_masked, vocab) and labels (n_masked,); "
            f"got {tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    if labels.numel() == 0:
        raise ValueError("there are no masked positions to predict (every label is IGNORE_INDEX)")
    _check_labels("labels", labels, logits)
    check_label_smoothing(label_smoothing)
    return F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)
