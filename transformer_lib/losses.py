"""Language-modelling losses.

Taught in chapter 1, *Tokens, embeddings and logits* (cross-entropy over the vocabulary),
chapter 7, *GPT-2* (causal LM) and chapter 8, *BERT* (masked LM).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE_INDEX = -100  # label value that contributes nothing to the loss (as in PyTorch and Hugging Face)


def _check_labels(name: str, labels: Tensor) -> None:
    if labels.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must hold integer token ids (torch.long), got dtype {labels.dtype}")


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
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (batch, seq, vocab) and targets (batch, seq); "
            f"got {tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    _check_labels("targets", targets)
    check_label_smoothing(label_smoothing)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX,
                           label_smoothing=label_smoothing)


def masked_lm_loss(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy at the masked positions only.

    ``logits``: ``(n_masked, vocab)`` (from ``BERT(..., masked_positions=...)``), ``labels``:
    ``(n_masked,)`` the original tokens there; ``label_smoothing`` as in :func:`causal_lm_loss`.
    """
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(
            f"logits must be (n_masked, vocab) and labels (n_masked,); "
            f"got {tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    _check_labels("labels", labels)
    check_label_smoothing(label_smoothing)
    if labels.numel() == 0:
        raise ValueError("there are no masked positions to predict (every label is IGNORE_INDEX)")
    return F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)
