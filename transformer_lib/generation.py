"""Text generation from a decoder-only model: greedy, temperature, top-k and top-p sampling.

Taught in chapter 7, *GPT-2* (``book/07_gpt2.ipynb``); the KV cache's speed in chapter 11.

Each step turns the last position's logits into a distribution over the next token:

    logits / temperature -> keep the top-k -> keep the smallest set with probability >= top_p -> softmax
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._checks import check_int, check_token_ids, is_real


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not is_real(temperature) or not temperature > 0:
        raise ValueError(
            f"temperature must be a number > 0, got {temperature!r}; for the most likely token use do_sample=False"
        )
    if top_k is not None:
        check_int("top_k", top_k, low=1)
    if top_p is not None and (not is_real(top_p) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")


def _check_logits(logits: Tensor) -> None:
    if not isinstance(logits, Tensor) or logits.dim() != 2:
        shape = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"logits must have shape (batch, vocab), got {shape}; take logits[:, -1] of the model output")


def next_token_probs(
    logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> Tensor:
    """``(batch, vocab)`` logits -> ``(batch, vocab)`` probabilities after temperature, top-k and top-p.

    Tokens cut by top-k or top-p get probability exactly 0; the most likely token always survives.
    Top-k keeps every token tied with the k-th, so ties can leave more than k.
    """
    _check_logits(logits)
    _check_sampling(temperature, top_k, top_p)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (batch, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # drop a token if the tokens ranked above it already reach top_p
        drop_sorted = (cum - sorted_logits.softmax(dim=-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(dim=-1)


def sample_next_token(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    do_sample: bool = True,
    generator: torch.Generator | None = None,
) -> Tensor:
    """``(batch, vocab)`` logits -> ``(batch, 1)`` next token ids (argmax when ``do_sample=False``)."""
    _check_logits(logits)
    if not do_sample:
        return logits.argmax(dim=-1, keepdim=True)
    probs = next_token_probs(logits, temperature, top_k, top_p)
    return torch.multinomial(probs, num_samples=1, generator=generator)


@torch.no_grad()
def generate(
    model: nn.Module,
    input_ids: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    do_sample: bool = True,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Extend ``input_ids`` ``(batch, seq)`` by ``max_new_tokens`` tokens
    -> ``(batch, seq + max_new_tokens)``.

    Defined in chapter 7. ``model`` is a decoder-only model such as :class:`GPT2` (it needs
    ``config.n_ctx``, ``config.vocab_size`` and ``new_kv_cache()``). The model only ever sees
    the last ``n_ctx`` tokens. With ``use_cache`` the keys and values of earlier tokens are reused;
    the tokens are the same as recomputing from scratch. Once the text outgrows the context,
    positions shift every step, so the cache is rebuilt from the cropped window each step.
    Sampling is reproducible with a seeded ``generator``.
    """
    check_int("max_new_tokens", max_new_tokens, low=0)
    _check_sampling(temperature, top_k, top_p)
    n_ctx = model.config.n_ctx
    check_token_ids("input_ids", input_ids, model.config.vocab_size)
    was_training = model.training
    model.eval()
    try:
        cache = None
        for _ in range(max_new_tokens):
            if use_cache and cache is not None and len(cache) < n_ctx:
                logits = model(input_ids[:, -1:], kv_cache=cache)  # only the newest token
            else:
                window = input_ids[:, -n_ctx:]
                cache = model.new_kv_cache() if use_cache else None
                logits = model(window, kv_cache=cache)
            nxt = sample_next_token(
                logits[:, -1], temperature=temperature, top_k=top_k, top_p=top_p,
                do_sample=do_sample, generator=generator,
            )
            input_ids = torch.cat([input_ids, nxt], dim=1)
    finally:
        model.train(was_training)
    return input_ids
