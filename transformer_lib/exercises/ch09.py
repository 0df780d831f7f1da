"""Checks for the exercises of chapter 9, *The full Transformer* (``book/09_transformer.ipynb``).

* :func:`check_teacher_forcing`: build the decoder's input ``[BOS] + y`` and target ``y + [EOS]``
  from a target sequence ``y``.
* :func:`check_greedy_decode`: greedy decoding with an :class:`~transformer_lib.EncoderDecoder`,
  one token at a time, rows that finished (emitted EOS) padded with EOS.

Each check runs the reader's function on inputs chosen so that every common mistake gives a
different answer, compares with the right answer, and names the mistake it recognises.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from ._checking import NOT_IMPLEMENTED, attempt, correct, fail, pending, Verdict

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
