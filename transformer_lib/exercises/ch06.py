"""Checks for the exercises of chapter 6, *Weight tying* (``book/06_weight_tying.ipynb``).

* :func:`check_tie_weights`: make a model's output head share the token embedding's tensor.
* :func:`check_gpt2_num_parameters`: the parameter count of a GPT-2-style model, by formula.

The first check hands the reader's function an untied :class:`~transformer_lib.models.gpt2.GPT2`
whose embedding and head hold different, recognisable values, so that copying, tying in the wrong
direction and re-initialising all leave different traces. The second compares with
:meth:`GPT2.num_parameters <transformer_lib.models.gpt2.GPT2.num_parameters>` on sizes where every
forgotten (or doubled) group of parameters changes the count by a different amount.
"""

from __future__ import annotations

import operator
from typing import Callable

import torch
from torch import nn

from ..models.gpt2 import GPT2, GPT2Config
from ._checking import NOT_IMPLEMENTED, attempt, correct, fail, pending, Verdict

__all__ = ["check_gpt2_num_parameters", "check_tie_weights", "untied_model", "PARAM_CASES"]

# ---------------------------------------------------------------- (a) tie_weights

TIE_VOCAB, TIE_D_MODEL = 23, 8  # different, so a transposed weight has a telltale shape

ASSIGN = "`model.lm_head.weight = model.token_embedding.weight`"


def untied_model(seed: int = 6) -> GPT2:
    """A tiny untied GPT-2 (vocab 23, d_model 8) whose embedding and head hold different values.

    The embedding's values are drawn at a larger scale than the head's, standing in for an
    embedding that has already been trained: tying must keep them.
    """
    config = GPT2Config(vocab_size=TIE_VOCAB, n_ctx=16, d_model=TIE_D_MODEL, n_layers=1, n_heads=2, tie_weights=False)
    with torch.random.fork_rng():  # leave the caller's random state alone
        torch.manual_seed(seed)
        model = GPT2(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.token_embedding.weight.copy_(0.5 * torch.randn(TIE_VOCAB, TIE_D_MODEL, generator=g))
        model.lm_head.weight.copy_(0.02 * torch.randn(TIE_VOCAB, TIE_D_MODEL, generator=g))
    return model


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.detach(), b.detach())


def _tied_reference(embedding: torch.Tensor) -> GPT2:
    """The library's own tied model with the same weights as the check's model (for the final comparison)."""
    ref = untied_model()
    ref.lm_head.weight = ref.token_embedding.weight
    with torch.no_grad():
        ref.token_embedding.weight.copy_(embedding)
    return ref


def check_tie_weights(tie_weights: Callable[[GPT2], object]) -> Verdict:
    """Check ``tie_weights(model)``: make ``model.lm_head`` use the token embedding's tensor, in place.

    ``model`` is an untied ``tl.GPT2`` (see :func:`untied_model`). Afterwards
    ``model.lm_head.weight is model.token_embedding.weight`` must hold, the shared tensor must
    still hold the *embedding's* values, and the model must compute what the library's tied GPT-2
    computes (logits, and one gradient that sums both uses). The function may return nothing or
    the model itself.

    Diagnoses: copying the values (``.data.copy_``, ``.clone()``) instead of sharing the tensor;
    sharing the memory through ``.data`` or a new ``nn.Parameter`` (two parameters, one storage);
    tying in the wrong direction (the embedding replaced by the head's weight, or by a weight of the
    wrong shape); a transposed head weight; assigning a plain tensor (a ``TypeError``);
    re-initialising after tying; a head with a bias; changing nothing.

    Returns True when right, False when ``tie_weights`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    name = "tie_weights"
    model = untied_model()
    emb_param, head_param = model.token_embedding.weight, model.lm_head.weight
    emb_values, head_values = emb_param.detach().clone(), head_param.detach().clone()
    V, d = TIE_VOCAB, TIE_D_MODEL
    try:
        returned = attempt(tie_weights, model)
    except TypeError as error:
        fail(f"{name} raised TypeError: {error}\nA module's parameter can only be replaced by an nn.Parameter "
             f"(or None). `model.token_embedding.weight` already is one: assign it as it is, {ASSIGN}, not a "
             f"tensor made from it (`.T`, `.clone()`, `.data`, `.detach()` give plain tensors).")
    if returned is NOT_IMPLEMENTED:
        return pending(name)
    if returned is not None and returned is not model:
        fail(f"{name} returned a different object ({type(returned).__name__}). Tie the model it is given, in "
             f"place ({ASSIGN}), and return nothing (or that same model).")

    emb, head = model.token_embedding.weight, model.lm_head.weight
    if tuple(emb.shape) != (V, d):
        fail(f"{name} is not right yet. The embedding's weight now has shape {tuple(emb.shape)}; it must stay "
             f"(vocab, d_model) = {(V, d)}. You replaced the embedding with a new head-shaped weight: that ties in "
             f"the wrong direction. The embedding keeps its table; the head is pointed at it: {ASSIGN}.")
    if tuple(head.shape) != (V, d):
        hint = ""
        if tuple(head.shape) == (d, V):
            hint = (" That is the embedding transposed. nn.Linear(d_model, vocab) stores its weight as "
                    "(out_features, in_features) = (vocab, d_model), the same layout as the embedding table, "
                    "and computes x @ weight.T itself: share the table without transposing it.")
        fail(f"{name} is not right yet. lm_head.weight has shape {tuple(head.shape)}, expected "
             f"(vocab, d_model) = {(V, d)}.{hint}")
    if getattr(model.lm_head, "bias", None) is not None:
        fail(f"{name} is not right yet. The head now has a bias: GPT-2's head is nn.Linear(d_model, vocab, "
             f"bias=False), and tying shares only its weight. Keep the model's own lm_head and assign its weight.")

    if head is emb:
        if _equal(emb, emb_values):
            pass  # tied, with the embedding's values: the functional comparison below decides
        elif _equal(emb, head_values):
            fail(f"{name} is not right yet. The head and embedding are one tensor, but it holds the *head's* "
                 f"values: you tied in the wrong direction (`model.token_embedding.weight = model.lm_head.weight`). "
                 f"The embedding's values (trained, in a real model) are lost, replaced by the head's. Point the "
                 f"head at the embedding: {ASSIGN}.")
        else:
            fail(f"{name} is not right yet. The head and embedding are one tensor, but its values are neither the "
                 f"embedding's nor the head's: something re-initialised it after tying (e.g. tl.init_weights_, "
                 f"model.apply(...), nn.init.normal_, or a new nn.Linear / TokenEmbedding). Tying must keep the "
                 f"embedding's values: tie last, and do not initialise afterwards.")
    else:
        same_memory = head.data_ptr() == emb.data_ptr() and head.stride() == emb.stride()
        if same_memory:
            fail(f"{name} is not right yet. lm_head.weight and token_embedding.weight share their memory but are "
                 f"two different Parameter objects (from `.data = ...` or `nn.Parameter(model.token_embedding.weight)`). "
                 f"Each gets its own .grad, an optimizer applies two updates to the same numbers every step, and "
                 f"count_parameters counts the table twice. Assign the Parameter object itself: {ASSIGN}.")
        if _equal(head, emb) and _equal(emb, emb_values):
            fail(f"{name} is not right yet. You copied the embedding's values into the head (`.data.copy_(...)`, "
                 f"`.clone()`): they are equal now, but they are still two tensors, so the first optimizer step "
                 f"makes them differ and the model still has two (vocab, d_model) matrices. Make the head use the "
                 f"very same Parameter: {ASSIGN}.")
        if _equal(head, emb) and _equal(emb, head_values):
            fail(f"{name} is not right yet. You copied the head's values into the embedding: that is the wrong "
                 f"direction (the embedding's values are lost), and a copy is not a tie (two tensors that drift "
                 f"apart at the first step). Share the embedding's Parameter with the head: {ASSIGN}.")
        if head is head_param and emb is emb_param and _equal(head, head_values) and _equal(emb, emb_values):
            fail(f"{name} did not change the model: lm_head.weight is still its own tensor. Assign to the "
                 f"module's attribute, {ASSIGN}; rebinding a local variable (`w = model.lm_head.weight; "
                 f"w = ...`) or comparing (`==`) changes nothing.")
        fail(f"{name} is not right yet: `model.lm_head.weight is model.token_embedding.weight` is False, so the "
             f"head and the embedding are still two tensors. Tie them with {ASSIGN}.")

    # tied, with the embedding's values: it must now behave exactly like the library's tied GPT-2
    ref = _tied_reference(emb_values)
    ids = torch.randint(0, V, (2, 6), generator=torch.Generator().manual_seed(0))
    model.zero_grad(set_to_none=True)
    loss = model.loss(ids[:, :-1], ids[:, 1:])
    loss.backward()
    ref_loss = ref.loss(ids[:, :-1], ids[:, 1:])
    ref_loss.backward()
    if not torch.allclose(loss, ref_loss, atol=1e-6) or not torch.allclose(emb.grad, ref.token_embedding.weight.grad, atol=1e-6):
        fail(f"{name} ties the two, but the model no longer computes what a tied GPT-2 computes: did it change "
             f"other weights too? Change only which tensor lm_head.weight is.")
    n_untied, n_tied = untied_model().num_parameters(), model.num_parameters()
    if n_untied - n_tied != V * d:
        fail(f"{name} ties the two, but the model now has {n_tied} parameters; tying should leave {n_untied - V * d} "
             f"(vocab x d_model = {V * d} fewer than the untied {n_untied}). Did it add or replace other modules?")
    return correct(f"lm_head.weight is token_embedding.weight: one ({V}, {d}) tensor with one gradient, and the "
                   f"model has {n_untied - n_tied} = vocab x d_model fewer parameters ({n_tied} instead of {n_untied}).")


# ---------------------------------------------------------------- (b) the parameter count by formula

# (vocab_size, n_ctx, d_model, n_layers, tied): every forgotten group changes these counts by a
# different amount (see tests/test_exercises_ch06.py), then GPT-2 small itself.
PARAM_CASES = [
    (101, 37, 24, 3, True),
    (101, 37, 24, 3, False),
    (50257, 1024, 768, 12, True),
]


def _count(vocab_size: int, n_ctx: int, d_model: int, n_layers: int, tied: bool) -> int:
    """The library's count: a GPT2 built on the meta device (no memory), tensors counted once."""
    n_heads = next(h for h in (12, 8, 6, 4, 3, 2, 1) if d_model % h == 0)  # the count does not depend on it
    config = GPT2Config(vocab_size=vocab_size, n_ctx=n_ctx, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                        tie_weights=tied)
    with torch.device("meta"):
        return GPT2(config).num_parameters()


def param_mistakes(vocab_size: int, n_ctx: int, d_model: int, n_layers: int, tied: bool) -> dict[str, int]:
    """The count with one deliberate mistake, for each mistake the check names (hint -> wrong count)."""
    V, n, d, L = vocab_size, n_ctx, d_model, n_layers
    right = _count(V, n, d, L, tied)
    linear_biases = L * (4 * d + 4 * d + d)  # W_Q, W_K, W_V, W_O: d each; W_in: 4d; W_out: d
    norms = 2 * L + 1  # two per block and the final one
    mistakes = {
        "You forgot the biases of the linear layers: every block has 4 x d_model in attention (W_Q, W_K, W_V, "
        "W_O) and 4 x d_model + d_model in the FFN (W_in, W_out).": right - linear_biases,
        "You forgot all the biases, those of the linear layers (9 x d_model per block) and those of the "
        "LayerNorms (d_model each).": right - linear_biases - norms * d,
        "You counted each LayerNorm as d_model parameters: a LayerNorm has a gain *and* a bias, "
        "2 x d_model.": right - norms * d,
        "You forgot the LayerNorms: two per block (before attention and before the FFN) and the final "
        "one, 2 x d_model each (gain and bias).": right - 2 * norms * d,
        "You forgot the LayerNorms inside the blocks (two per block, 2 x d_model each).": right - 4 * L * d,
        "You forgot the final LayerNorm (norm_f, 2 x d_model) that pre-norm GPT-2 applies before the head.":
            right - 2 * d,
        "You forgot the position embeddings: GPT-2 learns one vector per position, n_ctx x d_model.":
            right - n * d,
        "The FFN's hidden size is 4 x d_model, not d_model: W_in is (4d, d) plus a 4d bias, W_out (d, 4d) "
        "plus a d bias.": right - L * (6 * d * d + 3 * d),
        "You left out the attention's output projection W_O (d_model x d_model plus a d_model bias).":
            right - L * (d * d + d),
        "That is the chapter's approximation, 12 L d_model^2 + (vocab + n_ctx) d_model: it leaves out the "
        "biases of the linear layers (9 x d_model per block) and the LayerNorms (two per block and the final "
        "one, 2 x d_model each), 13 x d_model per block and 2 x d_model more. The exercise asks for the exact "
        "count: add them.": right - 13 * L * d - 2 * d,
        "That is the chapter's approximation without the position table, 12 L d_model^2 + vocab x d_model: "
        "add the position embeddings (n_ctx x d_model), the biases of the linear layers (9 x d_model per "
        "block) and the LayerNorms (2 x d_model each, two per block and the final one).":
            right - 13 * L * d - 2 * d - n * d,
    }
    if tied:
        mistakes["You counted the tied head as well: with tying, lm_head.weight *is* the token embedding, "
                 "one tensor, so vocab x d_model is counted once."] = right + V * d
        mistakes["You left out the token embedding: with tying it is also the output head, but it is still "
                 "vocab x d_model parameters, counted once."] = right - V * d
    else:
        mistakes["Untied, the head is a second (vocab, d_model) matrix: add vocab x d_model for lm_head "
                 "(it has no bias)."] = right - V * d
        mistakes["Untied, the head is nn.Linear(d_model, vocab, bias=False): it has no bias, so it adds "
                 "vocab x d_model, not vocab x d_model + vocab."] = right + V
    return mistakes


def _as_int(name: str, got) -> int:
    if isinstance(got, float) and got.is_integer():
        return int(got)
    if isinstance(got, bool):
        fail(f"{name} should return the number of parameters, an int, but it returned {got!r}.")
    try:
        return operator.index(got)
    except TypeError:
        fail(f"{name} should return one int, the number of parameters, but it returned "
             f"{type(got).__name__} {got!r:.60}.")


def check_gpt2_num_parameters(num_parameters: Callable[[int, int, int, int, bool], int]) -> Verdict:
    """Check ``num_parameters(vocab_size, n_ctx, d_model, n_layers, tied) -> int``.

    The model is the library's GPT-2 (``tl.GPT2``): learned positions, pre-norm blocks of
    multi-head attention and a 4 x d_model GELU FFN, biases everywhere except the head, LayerNorms
    with gain and bias, a final LayerNorm, and a head tied to the token embedding when ``tied``.
    The count does not depend on ``n_heads``. Compared with ``GPT2(config).num_parameters()`` on
    two small configurations (tied and untied) and on GPT-2 small.

    Diagnoses: forgotten biases (of the linear layers, or all), LayerNorms counted without their
    bias, forgotten LayerNorms (all, the blocks', or the final one), forgotten position embeddings,
    an FFN of width d_model, a missing W_O, the chapter's approximation ``12 L d^2 + (V + n_ctx) d``
    (with or without the positions), the tied head counted twice (or the embedding not at all), and,
    untied, a missing head or a head with a bias.

    Returns True when right, False when ``num_parameters`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    name = "num_parameters"
    for case in PARAM_CASES:
        got = attempt(num_parameters, *case)
        if got is NOT_IMPLEMENTED:
            return pending(name)
        got = _as_int(name, got)
        expected = _count(*case)
        if got == expected:
            continue
        args = "vocab_size={}, n_ctx={}, d_model={}, n_layers={}, tied={}".format(*case)
        for hint, wrong in param_mistakes(*case).items():
            if got == wrong:
                fail(f"{name}({args}) = {got:,}, expected {expected:,}. {hint}")
        fail(f"{name}({args}) = {got:,}, expected {expected:,} (off by {got - expected:+,}). Add up the groups "
             f"one by one against the table in the text: embeddings, then per block the two LayerNorms, "
             f"attention and the FFN, then the final LayerNorm and the head.")
    small = _count(*PARAM_CASES[-1])
    return correct(f"Your formula matches the library's count on every configuration, GPT-2 small included "
                   f"({small:,} parameters).")
