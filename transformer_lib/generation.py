"""Text generation: greedy, temperature, top-k and top-p sampling, and beam search.

Taught in chapter 7, *GPT-2* (``book/07_gpt2.ipynb``); beam search in chapter 9, *The full
Transformer*; the KV cache's speed in chapter 11.

Each sampling step turns the last position's logits into a distribution over the next token:

    logits / temperature -> keep the top-k -> keep the smallest set with probability >= top_p -> softmax

Beam search keeps the ``num_beams`` best partial sequences by total log-probability instead.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import check_bool, check_finite_logits, check_int, check_token_ids, is_real


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
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating-point scores, got dtype {logits.dtype}")
    check_finite_logits(logits)  # NaN would make argmax pick token 0, and sampling fail


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
    check_bool("do_sample", do_sample)
    if do_sample:
        _check_sampling(temperature, top_k, top_p)
    return _next_token(logits, temperature, top_k, top_p, do_sample, generator)


def _next_token(logits: Tensor, temperature, top_k, top_p, do_sample: bool, generator) -> Tensor:
    """:func:`sample_next_token` once its arguments are checked."""
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
    num_beams: int = 1,
    length_penalty: float = 1.0,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    early_stopping: bool = False,
) -> Tensor:
    """Extend ``input_ids`` ``(batch, seq)`` by ``max_new_tokens`` tokens
    -> ``(batch, seq + max_new_tokens)``.

    Defined in chapter 7. ``model`` is a decoder-only model such as :class:`GPT2` (it needs
    ``config.n_ctx``, ``config.vocab_size`` and ``new_kv_cache()``). The model only ever sees
    the last ``n_ctx`` tokens. With ``use_cache`` the keys and values of earlier tokens are reused;
    the tokens are the same as recomputing from scratch. Once the text outgrows the context,
    positions shift every step, so the cache is rebuilt from the cropped window each step.
    Sampling is reproducible with a seeded ``generator``.

    ``eos_token_id``: a row that emits it has ended; later tokens of that row are ``pad_token_id``
    (else ``eos_token_id``), and generation stops once every row has ended (as Hugging Face's).

    ``num_beams > 1``: beam search (:func:`beam_search`, chapter 9) instead of sampling, with
    ``length_penalty``, ``eos_token_id``, ``pad_token_id`` and ``early_stopping`` as in Hugging
    Face's ``generate``; the text must fit in the context (``seq + max_new_tokens <= n_ctx``).
    """
    _check_generate(model, input_ids, max_new_tokens, num_beams, do_sample, use_cache, temperature, top_k,
                    top_p, length_penalty, eos_token_id, pad_token_id, early_stopping, generator)
    n_ctx = model.config.n_ctx
    was_training = model.training
    model.eval()
    try:
        if num_beams > 1:
            return beam_search(lambda ids: _finite(model(ids)[:, -1], model), input_ids, max_new_tokens,
                               num_beams, vocab_size=model.config.vocab_size, length_penalty=length_penalty,
                               eos_token_id=eos_token_id, pad_token_id=pad_token_id,
                               early_stopping=early_stopping)
        cache = None
        ended = None if eos_token_id is None else torch.zeros_like(input_ids[:, :1], dtype=torch.bool)
        for _ in range(max_new_tokens):
            if use_cache and cache is not None and len(cache) < n_ctx:
                logits = model(input_ids[:, -1:], kv_cache=cache)  # only the newest token
            else:
                window = input_ids[:, -n_ctx:]
                cache = model.new_kv_cache() if use_cache else None
                logits = model(window, kv_cache=cache)
            check_finite_logits(logits[:, -1], model)  # NaN weights (a diverged run) say so
            nxt = _next_token(logits[:, -1], temperature, top_k, top_p, do_sample, generator)
            if ended is not None:  # an ended row is padded; all ended: stop
                nxt = torch.where(ended, eos_token_id if pad_token_id is None else pad_token_id, nxt)
                ended |= nxt == eos_token_id
            input_ids = torch.cat([input_ids, nxt], dim=1)
            if ended is not None and bool(ended.all()):
                break
    finally:
        model.train(was_training)
    return input_ids


def _finite(logits: Tensor, model: nn.Module) -> Tensor:
    check_finite_logits(logits, model)  # NaN weights (a diverged run) say so
    return logits


def _check_generate(model, input_ids, max_new_tokens, num_beams, do_sample, use_cache, temperature, top_k,
                    top_p, length_penalty, eos_token_id, pad_token_id, early_stopping, generator) -> None:
    """:func:`generate`'s arguments, checked before the model runs."""
    _check_decoder_only(model)
    check_int("max_new_tokens", max_new_tokens, low=0)
    check_int("num_beams", num_beams, low=1)
    for name, value in (("do_sample", do_sample), ("use_cache", use_cache),
                        ("early_stopping", early_stopping)):
        check_bool(name, value)
    vocab_size, n_ctx = model.config.vocab_size, model.config.n_ctx
    for name, value in (("eos_token_id", eos_token_id), ("pad_token_id", pad_token_id)):
        if value is not None:
            check_int(name, value, low=0, high=vocab_size - 1)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}: "
                        "torch.Generator(device).manual_seed(0)")
    check_token_ids("input_ids", input_ids, vocab_size)
    if num_beams > 1:
        if do_sample:
            raise ValueError("beam search is deterministic: pass do_sample=False with num_beams > 1")
        if input_ids.shape[1] + max_new_tokens > n_ctx:
            raise ValueError(f"beam search needs the whole text in the context: input_ids has "
                             f"{input_ids.shape[1]} tokens + max_new_tokens={max_new_tokens} > n_ctx={n_ctx}")
        if not is_real(length_penalty):
            raise TypeError(f"length_penalty must be a number, got {length_penalty!r}")
    elif do_sample:
        _check_sampling(temperature, top_k, top_p)
        if generator is not None and generator.device.type != input_ids.device.type:
            raise ValueError(f"generator is on {generator.device} but input_ids on {input_ids.device}: "
                             f"make it with torch.Generator({input_ids.device.type!r}).manual_seed(...)")


def _check_decoder_only(model: nn.Module) -> None:
    config = getattr(model, "config", None)
    if not callable(getattr(model, "new_kv_cache", None)) or not hasattr(config, "n_ctx"):
        name = type(model).__name__
        hint = (" For the encoder-decoder use its own model.generate(src_ids, bos_token_id, ...)."
                if callable(getattr(model, "decode", None)) else
                " An encoder such as BERT sees the whole sequence in both directions and is not"
                " trained to predict the next token: fill in [MASK]s with its logits instead.")
        raise TypeError(f"tl.generate needs a decoder-only language model such as tl.GPT2 "
                        f"(with config.n_ctx and new_kv_cache()), got {name}.{hint}")


def beam_search(
    next_logits: Callable[[Tensor], Tensor],
    input_ids: Tensor,
    max_new_tokens: int,
    num_beams: int,
    *,
    vocab_size: int,
    length_penalty: float = 1.0,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    early_stopping: bool = False,
) -> Tensor:
    """Beam search: the ``num_beams`` most probable continuations are kept at every step.

    Defined in chapter 9. ``next_logits(ids)`` maps ``(rows, seq)`` ids to the ``(rows, vocab)``
    logits of the next token (a decoder: ``model(ids)[:, -1]``). ``input_ids``: ``(batch, seq)``
    prompts (the encoder-decoder's: its BOS). Returns ``(batch, seq + n)`` ids, ``n <=
    max_new_tokens``, rows that ended early padded with ``pad_token_id`` (else ``eos_token_id``).

    A sequence's score is its total log-probability divided by ``length ** length_penalty``
    (the length counts generated tokens, EOS included): 0 ranks by total log-probability,
    larger values favour longer outputs. A hypothesis ends at ``eos_token_id`` or at
    ``max_new_tokens``; the best ``num_beams`` ended ones are kept, and the best of them returned.
    Search stops when no running beam can beat the worst kept one (``early_stopping=True``: as
    soon as ``num_beams`` have ended). Step for step what Hugging Face's ``generate(num_beams=...)``
    does (transformers 4.5x), so it returns the same tokens (tested).
    """
    _check_beam_search(next_logits, input_ids, max_new_tokens, num_beams, vocab_size, length_penalty,
                       eos_token_id, pad_token_id)
    batch, prompt_len = input_ids.shape
    if max_new_tokens == 0:
        return input_ids
    device, NEG = input_ids.device, -1.0e9  # NEG: "impossible", as a finite number
    # candidates per step: enough that num_beams survive the ones that end
    n_keep = min(2 * num_beams, num_beams * vocab_size)
    max_len = prompt_len + max_new_tokens
    fill = pad_token_id if pad_token_id is not None else (eos_token_id if eos_token_id is not None else 0)

    # running beams: (batch, num_beams, max_len) ids, their total log-probabilities
    running = input_ids[:, None, :].repeat(1, num_beams, 1)
    running = torch.cat([running, running.new_full((batch, num_beams, max_new_tokens), fill)], dim=2)
    running_scores = torch.full((batch, num_beams), NEG, device=device)
    running_scores[:, 0] = 0.0  # all beams start equal: let only the first one expand at step 1
    # ended hypotheses: the best num_beams per row, scores already divided by the length penalty
    ended = running.clone()
    ended_scores = torch.full((batch, num_beams), NEG, device=device)
    ended_lengths = torch.zeros((batch, num_beams), dtype=torch.long, device=device)
    ended_valid = torch.zeros((batch, num_beams), dtype=torch.bool, device=device)
    can_improve = torch.ones(batch, dtype=torch.bool, device=device)
    rows = torch.arange(batch, device=device)[:, None]

    for cur_len in range(prompt_len, max_len):
        ids = running[:, :, :cur_len].reshape(batch * num_beams, cur_len)
        logits = next_logits(ids)
        if cur_len == prompt_len:  # once: the function's output has the promised shape
            _check_next_logits(logits, ids.shape[0], vocab_size)
        log_probs = F.log_softmax(logits.float(), dim=-1)[:, :vocab_size]
        total = (log_probs.view(batch, num_beams, -1) + running_scores[:, :, None]).view(batch, -1)
        cand_scores, flat = torch.topk(total, n_keep, dim=1)  # (batch, n_keep), best first
        beam, token = flat // vocab_size, flat % vocab_size
        cand = running[rows, beam].clone()  # (batch, n_keep, max_len)
        cand[:, :, cur_len] = token
        ends = torch.full_like(token, cur_len + 1 == max_len, dtype=torch.bool)
        if eos_token_id is not None:
            ends |= token == eos_token_id

        # ended candidates among the best num_beams join the kept hypotheses
        new_len = cur_len + 1 - prompt_len
        scored = cand_scores / new_len**length_penalty
        allowed = ends & can_improve[:, None]
        allowed[:, num_beams:] = False
        if early_stopping:
            allowed &= ~ended_valid.all(dim=1, keepdim=True)
        scored = torch.where(allowed, scored, scored + 3 * NEG)
        merged_scores = torch.cat([ended_scores, scored], dim=1)
        keep = torch.topk(merged_scores, num_beams, dim=1).indices
        ended = torch.cat([ended, cand], dim=1)[rows, keep]
        ended_scores = merged_scores[rows, keep]
        ended_lengths = torch.cat([ended_lengths, torch.full_like(token, new_len)], dim=1)[rows, keep]
        ended_valid = torch.cat([ended_valid, allowed], dim=1)[rows, keep]

        # the best num_beams candidates that did not end run on
        open_scores = cand_scores + ends.float() * NEG
        best = torch.topk(open_scores, num_beams, dim=1).indices
        running, running_scores = cand[rows, best], open_scores[rows, best]

        # could a running beam still beat the worst kept hypothesis? (HF's heuristic)
        best_possible = running_scores[:, :1] / new_len**length_penalty
        worst_kept = torch.where(ended_valid, ended_scores.min(dim=1, keepdim=True).values, NEG)
        can_improve &= (best_possible > worst_kept).any(dim=1)
        if not can_improve.any() or ends.all() or (early_stopping and ended_valid.all()):
            break

    best_seq, length = ended[:, 0], ended_lengths[:, 0]
    out_len = prompt_len + int(length.max())
    return best_seq[:, :out_len]


def _check_beam_search(next_logits, input_ids, max_new_tokens, num_beams, vocab_size, length_penalty,
                       eos_token_id, pad_token_id) -> None:
    if not callable(next_logits):
        raise TypeError(f"next_logits must be a function of ids (rows, seq) -> logits (rows, vocab), "
                        f"got {type(next_logits).__name__}; for a decoder: lambda ids: model(ids)[:, -1]")
    check_int("vocab_size", vocab_size, low=1)
    check_int("num_beams", num_beams, low=1)
    check_int("max_new_tokens", max_new_tokens, low=0)
    if not is_real(length_penalty):
        raise TypeError(f"length_penalty must be a number, got {length_penalty!r}")
    for name, value in (("eos_token_id", eos_token_id), ("pad_token_id", pad_token_id)):
        if value is not None:
            check_int(name, value, low=0, high=vocab_size - 1)
    check_token_ids("input_ids", input_ids, vocab_size)  # (batch, seq): one prompt is input_ids[None]


def _check_next_logits(logits, rows: int, vocab_size: int) -> None:
    if not isinstance(logits, Tensor) or logits.dim() != 2 or logits.shape[0] != rows \
            or logits.shape[1] < vocab_size:
        got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"next_logits must return (rows={rows}, vocab >= vocab_size={vocab_size}) logits "
                         f"of the next token, got {got}; for a decoder: lambda ids: model(ids)[:, -1]")
    check_finite_logits(logits)
