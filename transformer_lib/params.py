"""Counting parameters.

Taught in chapter 6, *Weight tying* (``book/06_weight_tying.ipynb``).
"""

from __future__ import annotations

from torch import nn


def count_parameters(model: nn.Module, exclude: tuple[nn.Module | None, ...] = ()) -> int:
    """Number of *distinct* parameters of ``model``, leaving out those of the ``exclude`` modules.

    ``model.parameters()`` yields a shared tensor once, so a tied embedding and output head
    count once; leaving out the embedding leaves out the tied head with it.
    """
    params = {id(p): p for p in model.parameters()}
    for module in exclude:
        if module is not None:
            for p in module.parameters():
                params.pop(id(p), None)
    return sum(p.numel() for p in params.values())
