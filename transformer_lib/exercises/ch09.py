"""Checks for the exercises of chapter 9, *The full Transformer* (``book/09_transformer.ipynb``).

* :func:`check_teacher_forcing`: build the decoder's input ``[BOS] + y`` and target ``y + [EOS]``
  from a target sequence ``y``.
* :func:`check_greedy_decode`: greedy decoding with an :class:`~transformer_lib.EncoderDecoder`,
  one token at a time, rows that finished (emitted EOS) padded with EOS.
* :func:`check_cross_attention`: cross-attention, queries from the decoder, keys and values from the
  encoder's memory, its padding hidden; compared with ``MultiHeadAttention(kind="cross")``.
* :func:`check_decoder_mask`: the decoder self-attention's bool mask, causal AND the target's padding,
  ``(batch, 1, T, T)``; compared with ``combine_masks(padding_mask(m), causal_mask(T))``.
* :func:`check_beam_step`: one step of ``tl.beam_search`` for one source: the best k of all k x vocab
  candidates, EOS candidates finished with ``total / length ** alpha``.

Each check runs the reader's function on inputs chosen so that every common mistake gives a
different answer, compares with the right answer, and names the mistake it recognises.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from einops import rearrange
from torch import Tensor

from ..layers.attention import MultiHeadAttention
from ..layers.masks import causal_mask, combine_masks, padding_mask
from ..models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from ._checking import NOT_IMPLEMENTED, ExerciseFailed, attempt, close, correct, fail, pending, Verdict

# ---------------------------------------------------------------- (a) teacher forcing

TF_BOS, TF_EOS = 11, 12
TF_TARGETS = ([7, 3, 3, 9, 1], [4, 0])  # repeated digits and two lengths: a hard-coded length shows


def _as_ids(name: str, got) -> Tensor:
    if not isinstance(got, Tensor):
        fail(f"{name} should be a torch.Tensor, but it is a {type(got).__name__}.")
    if got.dtype not in (torch.int64, torch.int32):
        fail(f"{name} should hold integer token ids (torch.long), but its dtype is {got.dtype}: "
             f"build it from y with torch.cat and torch.tensor([...]) of ints.")
    if got.dim() != 1:
        fail(f"{name} should be 1-D like y, but it has shape {tuple(got.shape)}.")
    return got


def _teacher_forcing_mistakes(y: list[int], bos: int, eos: int) -> list[tuple[str, list[int] | None, list[int] | None]]:
    """``(hint, tgt_in, tgt_out)`` for each known mistake; None: that half may be anything."""
    bos_target = ("tgt_out starts with BOS. BOS is never a target: it is the decoder's first *input*, and the "
                  "first target is y[0]. Use tgt_out = y + [EOS].")
    eos_input = ("tgt_in contains EOS. Nothing is predicted after EOS, so EOS is never fed to the decoder "
                 "during training: tgt_in = [BOS] + y.")
    return [
        ("You swapped them: tgt_in = y + [EOS] and tgt_out = [BOS] + y. The decoder *reads* BOS first and "
         "*predicts* EOS last: tgt_in = [BOS] + y, tgt_out = y + [EOS].", y + [eos], [bos] + y),
        ("Off by one: tgt_in is [BOS] + y without its last token, and tgt_out is y without EOS. Both must be "
         "len(y) + 1 long: the model has to learn to emit EOS after the last token of y, so that generation "
         "knows when to stop.", [bos] + y[:-1], y),
        ("Off by one: tgt_out is shifted by two, it skips the first token of y (y[1:] + [EOS]). Only the input "
         "is shifted, by one (BOS in front); the target is y itself followed by EOS.", None, y[1:] + [eos]),
        (bos_target, None, [bos] + y),
        (bos_target, None, [bos] + y + [eos]),
        (eos_input, y + [eos], None),
        (eos_input, [bos] + y + [eos], None),
        ("tgt_in has no BOS in front: the decoder's first input is BOS (it has not produced anything yet), "
         "so tgt_in = [BOS] + y.", y, None),
        ("tgt_out has no EOS at the end: without it the model never learns to stop. tgt_out = y + [EOS].", None, y),
    ]


def check_teacher_forcing(teacher_forcing: Callable[[Tensor, int, int], tuple[Tensor, Tensor]]) -> Verdict:
    """Check ``teacher_forcing(y, bos_id, eos_id) -> (tgt_in, tgt_out)``.

    ``y`` is a 1-D ``torch.long`` tensor of target tokens. Expected: ``tgt_in = [BOS] + y`` (what the
    decoder reads) and ``tgt_out = y + [EOS]`` (what it must predict at each position), both 1-D of
    length ``len(y) + 1``, so that ``tgt_out[t]`` is the token that follows ``tgt_in[t]``. Diagnoses:
    no shift (the two equal), BOS in the targets, EOS in the inputs, the two swapped, off-by-one
    (a token dropped, both BOS and EOS in each, the target shifted by two), a missing BOS or EOS.
    """
    name = "teacher_forcing"
    for target in TF_TARGETS:
        y = torch.tensor(target)
        got = attempt(teacher_forcing, y.clone(), TF_BOS, TF_EOS)
        if got is NOT_IMPLEMENTED:
            return pending(name)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            fail(f"{name} should return a pair (tgt_in, tgt_out), but it returned {type(got).__name__}"
                 + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else "") + ".")
        tgt_in, tgt_out = _as_ids("tgt_in", got[0]).tolist(), _as_ids("tgt_out", got[1]).tolist()
        want_in, want_out = [TF_BOS] + target, target + [TF_EOS]
        if tgt_in == want_in and tgt_out == want_out:
            continue
        where = f"For y = {target} (BOS = {TF_BOS}, EOS = {TF_EOS}) you returned tgt_in = {tgt_in}, tgt_out = {tgt_out}. "
        if tgt_in == tgt_out:
            extra = " (BOS is an input, never a target)" if tgt_out[:1] == [TF_BOS] else ""
            extra += " (EOS is a target, never an input)" if TF_EOS in tgt_in else ""
            fail(f"{name} is not right yet. {where}They are the same sequence: there is no shift{extra}. Position t "
                 f"of the decoder reads tgt_in[t] and must predict the *next* token, tgt_out[t]: tgt_in = [BOS] + y, "
                 f"tgt_out = y + [EOS].")
        for hint, bad_in, bad_out in _teacher_forcing_mistakes(target, TF_BOS, TF_EOS):
            if (bad_in is None or tgt_in == bad_in) and (bad_out is None or tgt_out == bad_out):
                fail(f"{name} is not right yet. {where}{hint}")
        wrong = [n for n, g, w in (("tgt_in", tgt_in, want_in), ("tgt_out", tgt_out, want_out)) if g != w]
        fail(f"{name} is not right yet. {where}Expected tgt_in = {want_in} and tgt_out = {want_out} "
             f"({' and '.join(wrong)} differ{'s' if len(wrong) == 1 else ''}).")
    return correct("tgt_in = [BOS] + y and tgt_out = y + [EOS]: position t reads tgt_in[t] and learns to predict "
                   "tgt_out[t], the token after it.")


# ---------------------------------------------------------------- (b) greedy decoding

GREEDY_SEED, GREEDY_STD = 369, 0.2  # a random model whose greedy outputs vary (chosen by a search)
GREEDY_BOS, GREEDY_EOS, GREEDY_NEW = 10, 3, 8


def greedy_check_model() -> tuple[EncoderDecoder, Tensor]:
    """The small random model and the ``(4, 6)`` source batch that the check decodes.

    Chosen so that the four rows emit EOS at different steps (and the model, left alone, would go on
    with other tokens after EOS), and so that reading the first position's logits gives other tokens
    than reading the last. Built without touching the global random state.
    """
    with torch.random.fork_rng():
        torch.manual_seed(GREEDY_SEED)
        config = EncoderDecoderConfig(vocab_size=12, n_ctx=16, d_model=32, n_layers=1, n_heads=2, d_ff=64,
                                      dropout=0.0, init_std=GREEDY_STD, tie_weights=False)
        model = EncoderDecoder(config).eval()
        src = torch.randint(0, 10, (4, 6))
    return model, src


@torch.no_grad()
def _greedy_variant(model: EncoderDecoder, src: Tensor, bos: int, eos: int | None, new: int, *, position: int = -1,
                    pad: int | None = None, newest_only: bool = False, swapped: bool = False) -> Tensor:
    """Greedy decoding with one deliberate change (for diagnosis): read logits at ``position``; pad with ``pad``;
    feed the decoder only the newest token (``newest_only``); encode the output and decode the source
    (``swapped``)."""
    memory = model.encode(src)
    out = torch.full((src.shape[0], 1), bos, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(new):
        if swapped:
            logits = model(out, src)  # (batch, S, vocab): the roles of the two sequences exchanged
        else:
            logits = model.decode(out[:, -1:] if newest_only else out, memory)
        nxt = logits[:, position].argmax(dim=-1)
        if eos is not None:
            nxt = torch.where(done, eos if pad is None else pad, nxt)
            done |= nxt == eos
        out = torch.cat([out, nxt[:, None]], dim=1)
    return out


def _rows(t: Tensor) -> str:
    return "\n".join(f"  {row}" for row in t.tolist())


def _right_until_eos(got: Tensor, expected: Tensor, eos: int) -> bool:
    """Every row agrees up to its first EOS, and some row differs after it."""
    for g, e in zip(got.tolist(), expected.tolist()):
        cut = e.index(eos) + 1 if eos in e[1:] else len(e)
        if g[:cut] != e[:cut]:
            return False
    return True


def check_greedy_decode(greedy_decode: Callable[..., Tensor]) -> Verdict:
    """Check ``greedy_decode(model, src_ids, bos_id, eos_id, max_new_tokens) -> (batch, 1 + max_new_tokens)``.

    Expected: start every row with ``bos_id``; ``max_new_tokens`` times, run the decoder on everything
    generated so far (``model.decode(out, model.encode(src_ids))`` or ``model(src_ids, out)``), take
    the argmax of the *last* position's logits and append it; a row that has emitted ``eos_id``
    keeps emitting ``eos_id``. The result equals ``model.generate(src_ids, bos_id, max_new_tokens,
    eos_id)``. Diagnoses: nothing appended, the BOS column missing, the first position's logits
    used (or the sequence never fed back), only the newest token fed to the decoder, source and
    target swapped, no stop at EOS, stopping the loop early, float ids.
    """
    name = "greedy_decode"
    model, src = greedy_check_model()
    bos, eos, new = GREEDY_BOS, GREEDY_EOS, GREEDY_NEW
    expected = model.generate(src, bos, new, eos)  # (4, 1 + new)
    got = attempt(greedy_decode, model, src.clone(), bos, eos, new)
    if got is NOT_IMPLEMENTED:
        return pending(name)
    if not isinstance(got, Tensor):
        fail(f"{name} should return a torch.Tensor of token ids, but it returned {type(got).__name__}.")
    if got.is_floating_point():
        fail(f"{name} should return integer token ids (torch.long), but its dtype is {got.dtype}. "
             f"argmax returns long ids; keep them as they are.")
    got = got.long().cpu()
    batch, width = expected.shape
    setting = f"(bos_id={bos}, eos_id={eos}, max_new_tokens={new}, a batch of {batch} sources)"
    if got.dim() == 2 and got.shape[0] == batch and got.shape[1] != width:
        if got.shape[1] == 1:
            fail(f"{name} returned only the BOS column, shape {tuple(got.shape)}: append each new token to the "
                 f"sequence (torch.cat([out, next_token[:, None]], dim=1)) and feed the longer sequence back in.")
        if got.shape[1] == width - 1 and torch.equal(got, expected[:, 1:]):
            fail(f"{name} returned the new tokens without the BOS column in front. Return the whole sequence, "
                 f"shape (batch, 1 + max_new_tokens), starting with bos_id, as model.generate does.")
        if got.shape[1] < width and torch.equal(got, expected[:, : got.shape[1]]):
            fail(f"{name} stopped after {got.shape[1] - 1} new tokens {setting}. Always generate max_new_tokens "
                 f"tokens: rows that finished keep emitting eos_id, so every row has 1 + max_new_tokens = {width} "
                 f"columns, whatever the batch (a loop that breaks once every row has finished returns a width that "
                 f"depends on the batch).")
    if tuple(got.shape) != (batch, width):
        fail(f"{name} should return shape (batch, 1 + max_new_tokens) = {(batch, width)}, but it returned "
             f"{tuple(got.shape)}.")
    if torch.equal(got, expected):
        return correct("Your loop matches model.generate: one decoder call per new token, the argmax of the last "
                       "position appended, EOS kept once emitted.")
    hint = None
    if torch.equal(got, _greedy_variant(model, src, bos, eos, new, position=0)) or torch.equal(
            got, _greedy_variant(model, src, bos, None, new, position=0)):
        hint = ("Every row repeats its first prediction: you read the logits of the first position "
                "(logits[:, 0]) instead of the last (logits[:, -1]), or you kept decoding [BOS] alone instead of "
                "the growing sequence. The next token is predicted by the last position of everything generated so far.")
    elif torch.equal(got, _greedy_variant(model, src, bos, eos, new, newest_only=True)):
        hint = ("Your decoder reads only the newest token at each step (model.decode(out[:, -1:], memory)), so it "
                "never sees what came before it and places it at position 0. Without a KV cache (EncoderDecoder "
                "keeps none) the decoder must read the whole sequence so far, out, every step; take the logits "
                "of its last position. Feeding only the newest token is what chapter 7's KV cache makes possible.")
    elif torch.equal(got, _greedy_variant(model, src, bos, eos, new, swapped=True)):
        hint = ("You swapped source and target: model(out, src_ids) encodes the tokens you generated and decodes "
                "the source. The source goes to the encoder, model.encode(src_ids) (or the first argument of "
                "model(src_ids, out)); the decoder reads the sequence generated so far.")
    elif torch.equal(got, model.generate(src, bos, new)):
        hint = (f"You did not stop at EOS: after a row emits eos_id={eos}, the model goes on predicting other "
                f"tokens. Keep a per-row `done` flag and emit eos_id for finished rows "
                f"(next_token = torch.where(done, eos_id, next_token); done |= next_token == eos_id).")
    elif _right_until_eos(got, expected, eos):
        hint = (f"Every row is right up to its first EOS, but not after it: once a row has emitted eos_id={eos} "
                f"it must keep emitting eos_id (not another padding id, not the model's predictions).")
    if hint:
        fail(f"{name} is not right yet. {hint}")
    fail(f"{name} gives other tokens than greedy decoding {setting}.\nExpected:\n{_rows(expected)}\n"
         f"Yours:\n{_rows(got)}\nTake the argmax over the vocabulary (dim=-1) of the last position's logits at each step.")


def _same(a, b: Tensor, atol: float = 1e-5) -> bool:
    """Same shape and values, NaN where the other has NaN (a reader's softmax over a row of -inf)."""
    return (isinstance(a, Tensor) and a.shape == b.shape
            and torch.allclose(a.detach().float(), b.float(), atol=atol, rtol=1e-4, equal_nan=True))


def _call(name: str, fn: Callable, args: tuple, called: str, hint: Callable[[Exception], str]):
    """The reader's function on copies of the tensor arguments; an exception becomes an ExerciseFailed
    that says what it was called with and, where the error says it, why."""
    try:
        return attempt(fn, *(a.clone() if isinstance(a, Tensor) else a for a in args))
    except ExerciseFailed:
        raise
    except Exception as e:  # the reader's bug: report it with the shapes it was called with
        raise ExerciseFailed(f"{name} raised {type(e).__name__}: {e}\n({called}). {hint(e)}".rstrip()) from e


# ---------------------------------------------------------------- (c) cross-attention

CROSS_BATCH, CROSS_D_MODEL, CROSS_N_HEADS = 2, 12, 3
# (T, memory_mask): first T == S, so that every mistake runs and its values name it; then T != S, where
# queries taken from the memory give S outputs and a key mask of S entries cannot meet T keys
CROSS_CASES = ((5, [[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]]),
               (3, [[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]]))


def cross_attention_parts(case: int = 0) -> tuple[MultiHeadAttention, Tensor, Tensor, Tensor]:
    """``attn = MultiHeadAttention(12, 3, kind="cross")`` in eval mode, the decoder stream ``x (2, T, 12)``,
    the ``memory (2, S, 12)`` and ``memory_mask (2, S)`` (1 = token, 0 = padding; both rows padded) of
    case ``case``. The weights are larger than PyTorch's default so that attention is far from uniform;
    built without touching the global random state."""
    T, mask = CROSS_CASES[case]
    g = torch.Generator().manual_seed(900 + case)
    with torch.random.fork_rng(devices=[]):  # nn.Linear's init draws from the global RNG
        attn = MultiHeadAttention(CROSS_D_MODEL, CROSS_N_HEADS, kind="cross").eval()
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
    memory_mask = torch.tensor(mask)
    x = torch.randn(CROSS_BATCH, T, CROSS_D_MODEL, generator=g)
    memory = torch.randn(CROSS_BATCH, memory_mask.shape[1], CROSS_D_MODEL, generator=g)
    return attn, x, memory, memory_mask


@torch.no_grad()
def _cross_variant(attn: MultiHeadAttention, x: Tensor, memory: Tensor, memory_mask: Tensor, *, q_from: str = "x",
                   kv_from: str = "memory", mask: str = "keys", scale: str = "d_head", dim: int = -1,
                   w_o: bool = True, heads: bool = True) -> Tensor:
    """Cross-attention written out, with one deliberate change (for diagnosis). ``mask``: "keys" (right),
    "none", "queries", "causal" (the keys' mask and a lower triangle), "inverted", "after" (weights zeroed
    after the softmax), "zero" (scores filled with 0); ``scale``: "d_head" (right), "d_model", "none",
    "d_head_squared" (divided by d_head, not its root)."""
    source = {"x": x, "memory": memory}
    h = attn.n_heads if heads else 1
    split = lambda t: rearrange(t, "b s (h d) -> b h s d", h=h)  # noqa: E731
    q = split(attn.W_Q(source[q_from]))
    k, v = split(attn.W_K(source[kv_from])), split(attn.W_V(source[kv_from]))
    div = {"d_head": math.sqrt(attn.d_head), "d_model": math.sqrt(attn.d_model), "none": 1.0,
           "d_head_squared": float(attn.d_head)}[scale]
    scores = q @ k.transpose(-2, -1) / div  # (batch, h, seq_q, seq_k)
    keep = memory_mask.bool()
    allowed = {"keys": keep[:, None, None, :], "none": None, "queries": keep[:, None, :, None],
               "causal": keep[:, None, None, :] & torch.ones(scores.shape[-2:], dtype=torch.bool).tril(),
               "inverted": ~keep[:, None, None, :], "after": None, "zero": None}[mask]
    if mask == "zero":
        scores = scores.masked_fill(~keep[:, None, None, :], 0.0)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim)
    if mask == "after":
        weights = weights * keep[:, None, None, :]
    out = rearrange(weights @ v, "b h s d -> b s (h d)")
    return attn.W_O(out) if w_o else out


def cross_attention_mistakes(attn: MultiHeadAttention, x: Tensor, memory: Tensor,
                             memory_mask: Tensor) -> list[tuple[str, Tensor]]:
    """``(hint, the output that mistake gives)`` for each known mistake that runs on these shapes."""
    mistakes = {
        "Your queries come from the memory and the keys and values from the decoder: it is the other way "
        "round. The decoder asks (q = W_Q x, one query per target position) and the source answers "
        "(k = W_K memory, v = W_V memory), so the output has one row per target position.":
            [dict(q_from="memory", kv_from="x", mask=m) for m in ("none", "queries")],
        "Your keys and values come from x, the decoder: that is the decoder's self-attention, not "
        "cross-attention. Take them from the encoder's output: k = W_K memory, v = W_V memory.":
            [dict(kv_from="x", mask=m) for m in ("keys", "none")],
        "You applied a causal mask: cross-attention has none. The whole source is known before the first "
        "target token is written, so every target position may read every real source token; only padding "
        "is hidden.": dict(mask="causal"),
        "You ignored memory_mask: the padded source positions are read like tokens. Hide them: "
        "scores.masked_fill(~mask, float('-inf')) with mask = memory_mask.bool()[:, None, None, :] "
        "(batch, 1, 1, S), or tl.padding_mask(memory_mask).": dict(mask="none"),
        "Your padding mask hides *queries* (it is laid along the target axis, "
        "memory_mask[:, None, :, None]): it must hide *keys*, the source positions, the last axis of the "
        "(batch, n_heads, T, S) scores: memory_mask.bool()[:, None, None, :].": dict(mask="queries"),
        "Your mask is the wrong way round: True (1) means *may attend*, so fill the scores with -inf where "
        "the mask is False: scores.masked_fill(~mask, float('-inf')), not masked_fill(mask, ...).":
            dict(mask="inverted"),
        "You zeroed the padded weights after the softmax without renormalising: each row no longer sums to "
        "1. Fill the scores with -inf *before* the softmax, so that the real tokens share all the weight.":
            dict(mask="after"),
        "You filled the padded scores with 0 instead of -inf: exp(0) = 1, so padding still gets weight. Use "
        "float('-inf') (exp(-inf) = 0).": dict(mask="zero"),
        f"You scaled the scores by sqrt(d_model) = sqrt({attn.d_model}): each head's dot products have "
        f"d_head = {attn.d_head} terms, so divide by sqrt(d_head) = sqrt(attn.d_head).": dict(scale="d_model"),
        "You did not scale the scores: divide q @ k^T by sqrt(d_head).": dict(scale="none"),
        "You divided the scores by d_head: divide by its square root, math.sqrt(attn.d_head).":
            dict(scale="d_head_squared"),
        "Your softmax runs over the queries (dim=-2): each target position's weights over the source must "
        "sum to 1, so the softmax runs over the keys, the last dimension.": dict(dim=-2),
        "You left out W_O: after merging the heads, the output goes through attn.W_O.": dict(w_o=False),
        f"You did not split into heads: one attention over all {attn.d_model} dimensions is not "
        f"{attn.n_heads} attentions of width {attn.d_head}. Split q, k, v with rearrange(t, 'b s (h d) -> "
        f"b h s d', h=attn.n_heads), attend, then merge back.": [dict(heads=False, scale=s) for s in
                                                                 ("d_head", "d_model")],
    }
    out = []
    for hint, variants in mistakes.items():
        for kw in variants if isinstance(variants, list) else [variants]:
            try:
                out.append((hint, _cross_variant(attn, x, memory, memory_mask, **kw)))
            except RuntimeError:  # this mistake cannot run on these shapes
                pass
    return out


def _cross_exception_hint(e: Exception, case: int) -> str:
    text = str(e)
    if "size of tensor" in text or "must match" in text or "shape" in text:
        shapes = "T = 5 and S = 5" if case == 0 else "T = 3 target positions and S = 6 source positions"
        return (f"With {shapes}: q = W_Q x is (batch, n_heads, T, d_head), k and v = W_K memory, W_V memory "
                f"are (batch, n_heads, S, d_head), the scores (batch, n_heads, T, S), and the padding mask hides "
                f"keys: memory_mask.bool()[:, None, None, :], (batch, 1, 1, S).")
    return ""


def check_cross_attention(fn: Callable[[MultiHeadAttention, Tensor, Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``fn(attn, x, memory, memory_mask) -> (batch, T, d_model)``: cross-attention.

    ``attn`` is a :class:`~transformer_lib.MultiHeadAttention` of ``kind="cross"``, ``x`` the decoder's
    stream ``(batch, T, d_model)``, ``memory`` the encoder's output ``(batch, S, d_model)``, ``memory_mask``
    ``(batch, S)`` (1 = token, 0 = padding). Expected: queries ``W_Q x``, keys and values ``W_K memory``,
    ``W_V memory``, split into heads, scores scaled by ``sqrt(d_head)`` with the padded *keys* hidden,
    softmax over the keys, heads merged, ``W_O``: ``attn(x, memory, mask=tl.padding_mask(memory_mask))``.

    Two cases, batch 2, d_model 12, 3 heads, both rows of the memory padded: T = S = 5 (every mistake runs,
    its values name it), then T = 3, S = 6. Diagnoses: queries from the memory (and keys and values from
    the decoder), keys and values from the decoder, a causal mask, the padding mask ignored, laid on the
    queries' axis, inverted, applied after the softmax or with 0 instead of -inf, the scale sqrt(d_model),
    none or d_head, the softmax over the queries, W_O left out, no split into heads.
    """
    name = "cross_attention"
    for case in range(len(CROSS_CASES)):
        attn, x, memory, memory_mask = cross_attention_parts(case)
        T, S = x.shape[1], memory.shape[1]
        called = (f"called with attn = MultiHeadAttention(d_model={attn.d_model}, n_heads={attn.n_heads}, "
                  f"kind='cross'), x {tuple(x.shape)}, memory {tuple(memory.shape)}, memory_mask "
                  f"{tuple(memory_mask.shape)}")
        with torch.no_grad():
            got = _call(name, fn, (attn, x, memory, memory_mask), called, lambda e: _cross_exception_hint(e, case))
            if got is NOT_IMPLEMENTED:
                return pending(name)
            expected = attn(x, memory, mask=padding_mask(memory_mask))
        where = f"{name} (T = {T} target positions, S = {S} source positions)"
        if not isinstance(got, Tensor):
            fail(f"{where} should return a torch.Tensor, but it returned {type(got).__name__}.")
        if got.shape != expected.shape:
            shape = tuple(got.shape)
            why = {(CROSS_BATCH, S, CROSS_D_MODEL):
                   " That is one row per *source* position: your queries come from the memory. The queries come "
                   "from x (q = W_Q x), the keys and values from the memory.",
                   (CROSS_BATCH, attn.n_heads, T, attn.d_head):
                   " You returned the heads unmerged: rearrange(out, 'b h s d -> b s (h d)'), then attn.W_O."}
            fail(f"{where} should return shape {tuple(expected.shape)}, (batch, T, d_model), but it returned "
                 f"{shape}.{why.get(shape, '')}")
        if _same(got, expected):
            continue
        for hint, wrong in cross_attention_mistakes(attn, x, memory, memory_mask):
            if _same(got, wrong):
                fail(f"{where} is not right yet. {hint}")
        if torch.isnan(got).any():
            fail(f"{where} returned NaN: a softmax over a row whose scores are all -inf. Only padded source "
                 f"positions (keys) are hidden, and every target position has real source tokens to read.")
        err = (got.float() - expected.float()).abs().max().item()
        fail(f"{where} gives the wrong values (largest difference from attn(x, memory, mask=...): {err:.3g}). "
             f"Check each step: project, split into heads, scale, mask the padded keys, softmax over the keys, "
             f"merge, W_O.")
    return correct("Your cross-attention equals attn(x, memory, mask=tl.padding_mask(memory_mask)): queries from "
                   "the decoder, keys and values from the memory, padded source positions hidden, no causal mask.")


# ---------------------------------------------------------------- (d) the decoder's mask

# batch 3 != T 5, so a (batch, T, T) mask cannot pass for (batch, n_heads, T, T); one row unpadded, one
# padded on the right (a target batch), one on the left (so that the key padding hides earlier tokens too)
DECODER_MASKS = ([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 1, 1, 1]],
                 [[1, 1, 0, 0], [0, 1, 1, 1]])
DECODER_HEADS = (2, 3)  # the answer must broadcast whatever the number of heads


def decoder_mask_mistakes(tgt_attention_mask: Tensor) -> list[tuple[str, Tensor]]:
    """``(hint, the mask that mistake gives)``, each broadcast to ``(batch, 1, T, T)``."""
    T = tgt_attention_mask.shape[1]
    keys = tgt_attention_mask.bool()[:, None, None, :]  # (batch, 1, 1, T)
    queries = tgt_attention_mask.bool()[:, None, :, None]  # (batch, 1, T, 1)
    ones = torch.ones(T, T, dtype=torch.bool)
    causal = ones.tril()
    full = lambda m: m.expand(tgt_attention_mask.shape[0], 1, T, T)  # noqa: E731
    return [
        ("You combined the two masks with OR (|): a key is visible only if *both* allow it, the causal mask "
         "and the padding mask, so combine them with AND (&), as tl.combine_masks does.", full(causal | keys)),
        ("Your triangle is transposed (triu): position i would see the *later* positions j >= i. The causal "
         "mask is the lower triangle, diagonal included: torch.ones(T, T, dtype=torch.bool).tril().",
         full(ones.triu() & keys)),
        ("Your causal part is the triangle *above* the diagonal, the part that is hidden: in the library's "
         "convention True means *may attend*, so keep the lower triangle, diagonal included (tril).",
         full(ones.triu(1) & keys)),
        ("Your causal mask leaves out the diagonal (tril(-1)): a position may attend to itself, so keep the "
         "diagonal: tril() (diagonal=0).", full(ones.tril(-1) & keys)),
        ("Your padding mask hides *queries* (tgt_attention_mask[:, None, :, None], along the rows): it must hide "
         "*keys*, the columns, the last axis: tgt_attention_mask.bool()[:, None, None, :].",
         full(causal & queries)),
        ("You hid the padded positions as queries *and* as keys. Hide them as keys only, as the library "
         "does (tl.padding_mask): a padded position's own output is never used (the loss ignores it), and a "
         "row with no visible key at all would be NaN in a plain softmax.", full(causal & keys & queries)),
        ("Your mask is only the causal one: the target's padding must be hidden too, AND the padding mask "
         "(batch, 1, 1, T) with the causal (T, T).", full(causal)),
        ("Your mask hides only the padding: the decoder is causal, so AND the causal mask (T, T), "
         "lower triangle, with the padding mask.", full(keys)),
        ("Your mask is inverted: True means *may attend* (the library's convention, as in "
         "F.scaled_dot_product_attention), so True where the key is a token and not in the future.",
         full(~(causal & keys))),
    ]


def _decoder_mask_shape_hint(shape: tuple[int, ...], batch: int, T: int) -> str:
    if shape == (batch, T, T):
        return (" A (batch, T, T) mask lines its batch axis up with the heads of (batch, n_heads, T, T) "
                "(broadcasting matches the last axes first): add the head axis, mask[:, None], (batch, 1, T, T).")
    if shape in ((batch, T), (batch, 1, T)):
        return (" That is the padding mask alone, without the causal part, and not shaped to broadcast: "
                "(batch, 1, 1, T) for the keys, AND (T, T) for the causal mask.")
    if len(shape) == 4 and shape[0] == batch and shape[1] != 1:
        return (f" Its second axis has {shape[1]} entries: the function does not know n_heads, so leave that "
                f"axis 1, (batch, 1, T, T), and broadcasting repeats it for every head.")
    return " Build it as (batch, 1, T, T): the padding mask (batch, 1, 1, T) AND the causal mask (T, T)."


def check_decoder_mask(fn: Callable[[Tensor], Tensor]) -> Verdict:
    """Check ``fn(tgt_attention_mask) -> bool mask``: the decoder self-attention's mask.

    ``tgt_attention_mask`` is ``(batch, T)``, 1 = token, 0 = padding. Expected: True where query ``i`` may
    attend to key ``j``, that is ``j <= i`` and ``j`` a token, broadcastable to ``(batch, n_heads, T, T)`` for
    any ``n_heads``: ``tl.combine_masks(tl.padding_mask(m), tl.causal_mask(T))``, ``(batch, 1, T, T)``.

    Two cases: batch 3, T 5 (rows unpadded, padded on the right and on the left) and batch 2, T 4.
    Diagnoses: OR instead of AND, the triangle transposed or above the diagonal, the diagonal left out,
    padding on the queries' axis or on both axes, one of the two masks missing, the mask inverted, a
    mask that is not bool, and shapes that do not broadcast to (batch, n_heads, T, T).
    """
    name = "decoder_mask"
    for rows in DECODER_MASKS:
        m = torch.tensor(rows)
        batch, T = m.shape
        where = f"{name} (tgt_attention_mask of shape {(batch, T)}: {rows})"
        got = _call(name, fn, (m,), f"called with tgt_attention_mask {tuple(m.shape)}",
                    lambda e: " tl.padding_mask(m) is (batch, 1, 1, T), tl.causal_mask(T) is (T, T): combine "
                              "them with &.")
        if got is NOT_IMPLEMENTED:
            return pending(name)
        expected = combine_masks(padding_mask(m), causal_mask(T))  # (batch, 1, T, T)
        if not isinstance(got, Tensor):
            fail(f"{where} should return a torch.Tensor, but it returned {type(got).__name__}.")
        if got.is_floating_point():
            if ((got == 0) | torch.isinf(got)).all():
                fail(f"{where} returned an additive mask (0 and -inf, dtype {got.dtype}): that is what the scores "
                     f"get, and the library adds it itself. Return the bool mask, True = may attend.")
            fail(f"{where} should return a bool mask (True = may attend), but its dtype is {got.dtype}.")
        shape = tuple(got.shape)
        try:
            views = [torch.broadcast_to(got, (batch, h, T, T)) for h in DECODER_HEADS]
        except RuntimeError:
            fail(f"{where} returned shape {shape}, which does not broadcast to (batch, n_heads, T, T) = "
                 f"{(batch, 'n_heads', T, T)}.{_decoder_mask_shape_hint(shape, batch, T)}")
        if got.dim() > 4 or (got.dim() == 4 and got.shape[1] != 1):
            fail(f"{where} returned shape {shape}.{_decoder_mask_shape_hint(shape, batch, T)}")
        got = views[0][:, :1]  # (batch, 1, T, T)
        if got.dtype != torch.bool:
            same = torch.equal(got.bool(), expected) and ((got == 0) | (got == 1)).all()
            fail(f"{where} should return a bool mask, but its dtype is {got.dtype}"
                 + (": the values are right, return it as bool (.bool()), which masked_fill and "
                    "F.scaled_dot_product_attention read as True = may attend." if same else "."))
        if torch.equal(got, expected):
            continue
        for hint, wrong in decoder_mask_mistakes(m):
            if torch.equal(got, wrong):
                fail(f"{where} is not right yet. {hint}")
        bad = (got != expected).nonzero()[0].tolist()
        fail(f"{where} is not right yet: for example row {bad[0]}, query {bad[2]}, key {bad[3]} is "
             f"{bool(got[tuple(bad)])}, expected {bool(expected[tuple(bad)])}. Query i may attend to key j "
             f"when j <= i and key j is a token.")
    return correct("Your mask is tl.combine_masks(tl.padding_mask(m), tl.causal_mask(T)): a key is visible when "
                   "it is not in the future AND not padding, (batch, 1, T, T), the same for every head.")


# ---------------------------------------------------------------- (e) one beam-search step

BEAM_K, BEAM_VOCAB, BEAM_EOS = 3, 6, 2
# (beam scores, best first; seed of the next-token logits; tokens generated so far; alpha). Chosen by a
# search (seeds 0-299) so that every mistake below gives its own answer: the best beam has two of the best
# three candidates, an EOS candidate is among the best k and another just below them, and the weakest beam
# is near-certain of its next token, so that forgetting the beams' scores changes the choice
BEAM_CASES = (((-0.7, -1.6, -2.9), 18, 3, 0.6), ((-1.2, -1.5, -4.0), 26, 6, 1.5))


def beam_step_inputs(case: int = 0) -> tuple[Tensor, Tensor, int, float]:
    """``beam_scores (k,)``, ``log_probs (k, vocab)``, ``n_generated`` and ``alpha`` of case ``case``."""
    scores, seed, n_generated, alpha = BEAM_CASES[case]
    g = torch.Generator().manual_seed(seed)
    logits = 2.5 * torch.randn(BEAM_K, BEAM_VOCAB, generator=g)
    return torch.tensor(scores), logits.log_softmax(-1), n_generated, alpha


def _beam_variant(beam_scores: Tensor, log_probs: Tensor, n_generated: int, eos_id: int, alpha: float, *,
                  add_beam: bool = True, probs: bool = False, per_beam: bool = False, eos_runs: bool = False,
                  swapped_index: bool = False, running_scores: str = "total", length: int = 1,
                  penalty: str = "power", finished_from: str = "best k"):
    """One step of the library's beam search (``tl.beam_search``, for one source) with one deliberate change
    (for diagnosis). Returns ``(beams, tokens, scores, finished)``; ``finished``: ``[(beam, score)]``."""
    k, vocab = log_probs.shape
    step = log_probs.exp() if probs else log_probs
    total = step + beam_scores[:, None] if add_beam else step  # (k, vocab): every candidate's score
    cand_scores, flat = total.flatten().sort(descending=True)  # all k x vocab candidates, best first
    beam, token = (flat % k, flat // k) if swapped_index else (flat // vocab, flat % vocab)
    ends = token == eos_id
    L = n_generated + length  # the library: tokens generated, EOS included
    pen = {"power": L ** alpha, "gnmt": ((5 + L) / 6) ** alpha, "none": 1.0, "linear": float(L)}[penalty]
    chosen = (torch.arange(len(flat)) < k) if finished_from == "best k" else torch.ones(len(flat), dtype=torch.bool)
    finished = [(int(beam[i]), float(cand_scores[i]) / pen) for i in range(len(flat)) if ends[i] and chosen[i]]
    if per_beam:  # every beam extended by its own best token that does not end
        best = total.masked_fill(torch.arange(vocab) == eos_id, float("-inf")).max(dim=-1)
        order = best.values.argsort(descending=True)
        run_beam, run_token, run_score = order, best.indices[order], best.values[order]
    else:
        keep = (torch.arange(len(flat)) if eos_runs else (~ends).nonzero()[:, 0])[:k]
        run_beam, run_token, run_score = beam[keep], token[keep], cand_scores[keep]
    run_score = {"total": run_score, "penalised": run_score / pen, "prob": run_score.exp(),
                 "token": log_probs[run_beam, run_token]}[running_scores]
    return run_beam, run_token, run_score, finished


def beam_step_reference(beam_scores: Tensor, log_probs: Tensor, n_generated: int, eos_id: int,
                        alpha: float) -> tuple[Tensor, Tensor, Tensor, list[tuple[int, float]]]:
    """The right answer: one step of ``tl.beam_search`` for one source (before its last step)."""
    return _beam_variant(beam_scores, log_probs, n_generated, eos_id, alpha)


def _running_mistakes() -> dict[str, dict]:
    return {
        "You forgot the beams' scores: a candidate's score is its beam's total log-probability plus the new "
        "token's, beam_scores[:, None] + log_probs, so a near-certain token on a weak beam does not win.":
            dict(add_beam=False),
        "You added probabilities (log_probs.exp()) to the beams' log-probabilities: add log-probabilities, "
        "so that the total is the log of the product of the probabilities.": dict(probs=True),
        "Every beam kept one child, its own best token: the candidates compete across beams. Flatten the "
        "(k, vocab) scores and take the best k over all k x vocab (a strong beam may keep two children and a "
        "weak one none).": dict(per_beam=True),
        "A candidate that ends with EOS is still among your running beams: it has ended. Set it aside as a "
        "finished hypothesis, and run on with the best k candidates that do not end with EOS.":
            dict(eos_runs=True),
        "You decoded the flat index with the number of beams: over the flattened (k, vocab) scores, candidate "
        "i is beam i // vocab, token i % vocab.": dict(swapped_index=True),
        "Your running beams are right, but you divided their scores by the length penalty: they all have the "
        "same length, and the library keeps their raw total log-probabilities; the penalty scores finished "
        "hypotheses only.": dict(running_scores="penalised"),
        "Your running beams are right, but their scores are probabilities: keep total log-probabilities "
        "(adding the next step's log-probabilities to them must stay a sum).": dict(running_scores="prob"),
        "Your running beams are right, but their scores are only the new token's log-probability: return "
        "the total, beam_scores[beam] + log_probs[beam, token].": dict(running_scores="token"),
    }


def _finished_mistakes(n_generated: int, alpha: float) -> dict[str, dict]:
    L = n_generated + 1
    return {
        "Your finished hypotheses are not penalised: divide each one's total log-probability by its length "
        "** alpha.": dict(penalty="none"),
        f"Your length leaves out the EOS token: the library counts the tokens generated, EOS included, "
        f"n_generated + 1 = {L}.": dict(length=0),
        f"Your length counts BOS too: the library counts the tokens generated only (BOS is the prompt), "
        f"EOS included: n_generated + 1 = {L}.": dict(length=2),
        "You used GNMT's penalty ((5 + length) / 6) ** alpha (the paper's, Wu et al. 2016): the library "
        "follows Hugging Face's generate, total / length ** alpha.": dict(penalty="gnmt"),
        "You divided by the length, not by length ** alpha: the penalty is length ** alpha (alpha = 1 would "
        "be the plain average).": dict(penalty="linear"),
        "You finished every EOS candidate, or every one among more than the best k: only the EOS candidates "
        "among the best k candidates end (the others are not good enough to be kept).":
            dict(finished_from="all"),
        "You returned no finished hypothesis: an EOS candidate among the best k ends; return (its beam, its "
        "total / length ** alpha) in finished.": dict(finished_from="none"),
    }


def _as_finished(name: str, got) -> list[tuple[int, float]]:
    if isinstance(got, Tensor) and got.dim() == 2 and got.shape[1] == 2:
        got = got.tolist()
    if not isinstance(got, (list, tuple)) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in got):
        fail(f"{name}: finished should be a list of (beam, score) pairs, but it is {got!r}.")
    try:
        return [(int(b), float(s)) for b, s in got]
    except (TypeError, ValueError, RuntimeError):
        fail(f"{name}: finished should be a list of (beam, score) pairs of numbers, but it is {got!r}.")


def _same_finished(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return len(a) == len(b) and all(x[0] == y[0] and math.isclose(x[1], y[1], rel_tol=1e-4, abs_tol=1e-5)
                                    for x, y in zip(a, b))


def check_beam_step(fn: Callable[..., tuple]) -> Verdict:
    """Check ``fn(beam_scores, log_probs, n_generated, eos_id, alpha) -> (beams, tokens, scores, finished)``.

    ``beam_scores (k,)``: the running beams' total log-probabilities; ``log_probs (k, vocab)``: each beam's
    next-token log-probabilities; ``n_generated``: the tokens each beam has generated (BOS not counted).
    Expected, as ``tl.beam_search`` does at a step before its last: every candidate (beam b, token v) scores
    ``beam_scores[b] + log_probs[b, v]``; of the best k over all k x vocab candidates, those whose token is
    ``eos_id`` finish with the score ``total / (n_generated + 1) ** alpha`` (``finished``: ``(beam, score)``
    pairs, best first); the running beams are the best k candidates that do not end, with their totals
    (``beams``, ``tokens``, ``scores``: ``(k,)``, best first).

    Two cases, k = 3, vocab 6. Diagnoses: the beams' scores forgotten, probabilities added, one child per
    beam, EOS candidates left running, the flat index decoded with k, running scores penalised, probabilities
    or token log-probabilities as running scores; no penalty, a length without EOS or with BOS, GNMT's
    penalty, a division by the length, EOS candidates finished outside the best k, no finished hypothesis.
    """
    name = "beam_step"
    for case in range(len(BEAM_CASES)):
        beam_scores, log_probs, n, alpha = beam_step_inputs(case)
        args = (beam_scores, log_probs, n, BEAM_EOS, alpha)
        where = (f"{name} (k = {BEAM_K} beams, vocab {BEAM_VOCAB}, eos_id = {BEAM_EOS}, n_generated = {n}, "
                 f"alpha = {alpha})")
        got = _call(name, fn, args, f"called with beam_scores {tuple(beam_scores.shape)}, log_probs "
                    f"{tuple(log_probs.shape)}, n_generated={n}, eos_id={BEAM_EOS}, alpha={alpha}",
                    lambda e: "")
        if got is NOT_IMPLEMENTED:
            return pending(name)
        if not isinstance(got, (tuple, list)) or len(got) != 4:
            fail(f"{where} should return (beams, tokens, scores, finished), but it returned "
                 f"{type(got).__name__}" + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else "") + ".")
        beams, tokens, scores, finished = got
        for label, t in (("beams", beams), ("tokens", tokens), ("scores", scores)):
            if not isinstance(t, Tensor):
                fail(f"{where}: {label} should be a torch.Tensor, but it is {type(t).__name__}.")
            if t.shape != (BEAM_K,):
                why = (f" That is k x k: you kept the best k of every beam; take the best k over all k x vocab "
                       f"candidates at once (flatten, then topk)." if t.numel() == BEAM_K ** 2 else "")
                fail(f"{where}: {label} should have shape ({BEAM_K},), one per running beam, but it has "
                     f"{tuple(t.shape)}.{why}")
        if beams.is_floating_point() or tokens.is_floating_point():
            fail(f"{where}: beams and tokens should be integer ids (torch.long); use // and %, not /.")
        finished = _as_finished(where, finished)
        want = beam_step_reference(*args)
        mine = (beams.long(), tokens.long(), scores.detach().float())
        if not (torch.equal(mine[0], want[0]) and torch.equal(mine[1], want[1]) and close(mine[2], want[2])):
            for hint, kw in _running_mistakes().items():
                wrong = _beam_variant(*args, **kw)
                if torch.equal(mine[0], wrong[0]) and torch.equal(mine[1], wrong[1]) and close(mine[2], wrong[2]):
                    fail(f"{where} is not right yet. {hint}")
            fail(f"{where} chooses other running beams.\nExpected (beam, token, score), best first: "
                 f"{_triples(*want[:3])}\nYours: {_triples(*mine)}\nScore every candidate by beam_scores[b] + "
                 f"log_probs[b, v], and keep the best {BEAM_K} that do not end with EOS.")
        if not _same_finished(finished, want[3]):
            for hint, kw in _finished_mistakes(n, alpha).items():
                wrong = [] if kw.get("finished_from") == "none" else _beam_variant(*args, **kw)[3]
                if _same_finished(finished, wrong):
                    fail(f"{where} is not right yet. {hint}")
            if sorted(finished) == sorted(want[3]) or _same_finished(sorted(finished), sorted(want[3])):
                fail(f"{where}: the right finished hypotheses, but not best first: sort them by score, "
                     f"highest first.")
            fail(f"{where} finishes other hypotheses.\nExpected (beam, score): "
                 f"{[(b, round(s, 4)) for b, s in want[3]]}\nYours: {[(b, round(s, 4)) for b, s in finished]}\n"
                 f"Of the best {BEAM_K} candidates, those with token eos_id finish, scored "
                 f"total / (n_generated + 1) ** alpha.")
    return correct("Your step is tl.beam_search's: the best k of all k x vocab candidates by total log-probability, "
                   "EOS candidates among them set aside with total / length ** alpha, the best k that do not end "
                   "running on.")


def _triples(beams: Tensor, tokens: Tensor, scores: Tensor) -> str:
    return ", ".join(f"({int(b)}, {int(t)}, {float(s):.3f})" for b, t, s in zip(beams, tokens, scores))
