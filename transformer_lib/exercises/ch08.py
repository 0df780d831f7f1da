"""Exercises for chapter 8, *BERT* (``book/08_bert.ipynb``).

* :func:`check_mlm_mask`: ``mlm_mask(input_ids, u_choose, u_action, u_token, mask_token_id, special_ids,
  vocab_size, mask_prob)``, BERT's masking of a batch, made deterministic by passing the uniform
  random numbers in: ``-> (corrupted input_ids, labels)``
* :func:`check_masked_lm_loss`: ``masked_lm_loss(hidden, input_ids, labels, head)``, the loss at the
  masked positions only, running the output head on those positions alone

The inputs are chosen so that every common mistake gives a different answer. For the masking: a
batch with ``[CLS]`` / ``[SEP]`` / padding and a vocabulary of 40 whose special ids are the first
four (so a random replacement drawn from the whole vocabulary, or an index used as an id, shows),
some special positions with a small ``u_choose`` (so choosing them shows), and every chosen
action (``[MASK]``, random, unchanged) present. For the loss: the chapter's vocabulary (65
characters and ``[MASK]`` = 65), chosen positions that became ``[MASK]``, one that became a random
token and one left unchanged (so a loss over the ``[MASK]`` inputs alone shows), and a head that
records which positions it was run on.
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..losses import IGNORE_INDEX, masked_lm_loss
from ._checking import NOT_IMPLEMENTED, ExerciseFailed, attempt, call, close, correct, expect_tensor, fail, pending, Verdict

MASK_FRACTION, RANDOM_FRACTION = 0.8, 0.1  # of the chosen positions: [MASK], a random token; the rest unchanged


def _first_match(name: str, got: Tensor, expected: Tensor, mistakes: dict[str, Tensor], what: str) -> None:
    """Fail with the hint of the first mistake ``got`` equals, else with where it differs."""
    for hint, wrong in mistakes.items():
        if close(got, wrong):
            fail(f"{name} is not right yet. {hint}")
    if got.dim() == 0:
        fail(f"{name} gives the wrong {what}: expected {expected.item():.4f}, got {got.item():.4f}. "
             f"Check each step against the text.")
    bad = (got.float() != expected.float()).nonzero()
    where = ", ".join(str(tuple(i.tolist())) for i in bad[:4])
    fail(f"{name} gives the wrong {what} at {len(bad)} of {got.numel()} positions (first ones: {where}). "
         f"Check each rule against the text.")


# ------------------------------------------------------------------------------------ masking

PAD, CLS, SEP, MASK = 0, 1, 2, 3
SPECIAL_IDS = (PAD, CLS, SEP, MASK)
VOCAB = 40
MASK_PROB = 0.15


def reference_mlm_mask(
    input_ids: Tensor, u_choose: Tensor, u_action: Tensor, u_token: Tensor, mask_token_id: int,
    special_ids: Sequence[int], vocab_size: int, mask_prob: float = MASK_PROB,
) -> tuple[Tensor, Tensor]:
    """The right answer (the rules of ``tl.MLMCollator``, with the random numbers passed in)."""
    maskable = ~torch.isin(input_ids, torch.tensor(list(special_ids)))
    chosen = (u_choose < mask_prob) & maskable
    to_mask = chosen & (u_action < MASK_FRACTION)
    to_random = chosen & (u_action >= MASK_FRACTION) & (u_action < MASK_FRACTION + RANDOM_FRACTION)
    allowed = torch.ones(vocab_size, dtype=torch.bool)
    allowed[list(special_ids)] = False
    replacements = allowed.nonzero().squeeze(1)  # the ids a random token may take, in increasing order
    random_ids = replacements[(u_token * len(replacements)).long()]
    corrupted = input_ids.clone()
    corrupted[to_mask] = mask_token_id
    corrupted[to_random] = random_ids[to_random]
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    return corrupted, labels


def mlm_mask_inputs(seed: int = 8) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``input_ids (6, 16)``: ``[CLS]`` text ``[SEP]`` then padding, and three uniform tensors of that shape.

    A few entries are set by hand so that every mistake shows: special positions with a small
    ``u_choose``; chosen positions of each action; a random replacement whose ``u_token`` would
    land on a special id if drawn from the whole vocabulary.
    """
    g = torch.Generator().manual_seed(seed)
    batch, seq = 6, 16
    ids = torch.randint(len(SPECIAL_IDS), VOCAB, (batch, seq), generator=g)
    lengths = [16, 14, 11, 16, 9, 13]  # tokens before padding, [CLS] and [SEP] included
    for b, n in enumerate(lengths):
        ids[b, 0], ids[b, n - 1] = CLS, SEP
        ids[b, n:] = PAD
    u_choose = torch.rand(batch, seq, generator=g)
    u_action = torch.rand(batch, seq, generator=g)
    u_token = torch.rand(batch, seq, generator=g)
    u_choose[0, 0] = 0.05  # [CLS]: chosen if specials are not excluded
    u_choose[2, 13] = 0.11  # padding
    u_choose[4, 8] = 0.02  # [SEP]
    for (b, t), action, token in [((0, 3), 0.85, 0.02), ((1, 5), 0.88, 0.6), ((3, 7), 0.95, 0.3),
                                  ((5, 4), 0.93, 0.7), ((2, 2), 0.3, 0.5), ((4, 5), 0.82, 0.97)]:
        u_choose[b, t], u_action[b, t], u_token[b, t] = 0.07, action, token  # random (x3), unchanged (x2), [MASK]
    return ids, u_choose, u_action, u_token


def mlm_mask_mistakes(ids: Tensor, u_choose: Tensor, u_action: Tensor, u_token: Tensor) -> tuple[dict, dict]:
    """``(label mistakes, corrupted-input mistakes)``: ``{hint: the tensor that mistake gives}``."""
    special = torch.tensor(SPECIAL_IDS)
    maskable = ~torch.isin(ids, special)
    chosen = (u_choose < MASK_PROB) & maskable
    chosen_any = u_choose < MASK_PROB  # specials too
    right_corrupted, right_labels = reference_mlm_mask(ids, u_choose, u_action, u_token, MASK, SPECIAL_IDS, VOCAB)
    n_repl = VOCAB - len(SPECIAL_IDS)
    random_right = len(SPECIAL_IDS) + (u_token * n_repl).long()  # replacements = [4, 40)
    ignore = torch.full_like(ids, IGNORE_INDEX)

    def corrupt(chosen_: Tensor, random_ids: Tensor = random_right, mask_below: float = MASK_FRACTION,
                random_below: float = MASK_FRACTION + RANDOM_FRACTION) -> Tensor:
        out = ids.clone()
        to_mask = chosen_ & (u_action < mask_below)
        to_random = chosen_ & (u_action >= mask_below) & (u_action < random_below)
        out[to_mask] = MASK
        out[to_random] = random_ids[to_random]
        return out

    labels = {
        "Your labels hold a token at every position. Only the chosen positions are predicted: labels must be "
        f"the original token there and IGNORE_INDEX ({IGNORE_INDEX}) everywhere else, so the loss skips them.": ids,
        "Your labels are 0 at the positions that were not chosen. 0 is a token id like any other (here padding; "
        "in the chapter's character vocabulary it is the newline), so the loss would train the model to predict "
        f"token 0 at every one of them. Put IGNORE_INDEX ({IGNORE_INDEX}) there: F.cross_entropy skips that label "
        "(its ignore_index defaults to -100), and BERT.mlm_loss runs the head only where labels != -100.":
            torch.where(chosen, ids, torch.zeros_like(ids)),
        "Your labels also hold the padding / [CLS] / [SEP] positions: a position whose token is in special_ids "
        "is never chosen. Require maskable = ~torch.isin(input_ids, special_ids) when choosing.":
            torch.where(chosen_any, ids, ignore),
        "Your labels hold the corrupted tokens ([MASK] and the random ids). The model must predict the "
        "*original* token: take the labels from input_ids before (or without) changing it.":
            torch.where(chosen, right_corrupted, ignore),
        "Your labels cover only the positions that became [MASK]. The 10% replaced by a random token and the "
        "10% left unchanged are chosen positions too, and the model is trained to predict them: labels = the "
        "original token at every chosen position.": torch.where(chosen & (u_action < MASK_FRACTION), ids, ignore),
        "Your labels are inverted: they hold the tokens that were *not* chosen. Labels are the original token "
        f"where u_choose < mask_prob (and the token is not special), IGNORE_INDEX ({IGNORE_INDEX}) elsewhere.":
            torch.where(chosen, ignore, ids),
        "You chose the positions where u_choose >= mask_prob, about 85% of them. A position is chosen with "
        "probability mask_prob = 15%: u_choose < mask_prob.": torch.where(maskable & (u_choose >= MASK_PROB), ids, ignore),
    }
    no_random = corrupt(chosen, random_ids=ids)
    corrupted = {
        "You also changed padding / [CLS] / [SEP] positions: a token in special_ids is never chosen, so it is "
        "never replaced. Choose only where ~torch.isin(input_ids, special_ids).": corrupt(chosen_any),
        "You applied the 80/10/10 split to every token instead of only the chosen 15%: most of your input is "
        "[MASK]. First choose 15% of the positions (u_choose < mask_prob); only those get [MASK] (80%), a "
        "random token (10%) or stay unchanged (10%).": corrupt(maskable),
        "You applied the 80/10/10 split to every token (special ones included) instead of only the chosen 15%. "
        "First choose 15% of the non-special positions; only those are changed.": corrupt(torch.ones_like(chosen)),
        "Your random replacements can be special tokens (padding, [CLS], [SEP], [MASK]): you drew from the whole "
        "vocabulary, int(u_token * vocab_size). BERT's original code and Hugging Face's collator do draw from the "
        "whole vocabulary, but this exercise follows tl.MLMCollator's default, which draws from the ids that are "
        "not special: replacements = the ids in [0, vocab_size) not in special_ids, then "
        "replacements[int(u_token * len(replacements))].":
            corrupt(chosen, random_ids=(u_token * VOCAB).long()),
        "Your random replacement is an index into the allowed ids, not the id itself: int(u_token * "
        "len(replacements)) can still be a special id. Use replacements[int(u_token * len(replacements))].":
            corrupt(chosen, random_ids=(u_token * n_repl).long()),
        "You skipped the random replacement: the chosen positions with 0.8 <= u_action < 0.9 must get a random "
        "token, replacements[int(u_token * len(replacements))], not stay unchanged.": no_random,
        "The chosen positions with 0.8 <= u_action < 0.9 became [MASK]: they must get a random token instead "
        "(only u_action < 0.8 gives [MASK]).": corrupt(chosen, mask_below=MASK_FRACTION + RANDOM_FRACTION),
        "All your chosen positions were changed: the 10% with u_action >= 0.9 must keep their original token "
        "(BERT keeps them to bias the representation towards the actual observed word; the random 10% is "
        "what keeps the model from trusting every visible token).":
            corrupt(chosen, random_below=1.0),
    }

    def by_intervals(layout: tuple[tuple[str, float], ...]) -> Tensor:
        """Each chosen position's action by where its u_action falls: ``layout`` lists (action, share)
        along [0, 1)."""
        out, low = ids.clone(), 0.0
        for action, share in layout:
            hit = chosen & (u_action >= low) & (u_action < low + share)
            low += share
            if action == "[MASK]":
                out[hit] = MASK
            elif action == "a random token":
                out[hit] = random_right[hit]
        return out

    def intervals(layout: tuple[tuple[str, float], ...]) -> str:
        parts, low = [], 0.0
        for action, share in layout:
            where = (f"u_action < {low + share:g}" if low == 0 else f"u_action >= {low:g}"
                     if low + share >= 1 - 1e-9 else f"{low:g} <= u_action < {low + share:g}")
            parts.append(f"{action} where {where}")
            low += share
        return ", ".join(parts)

    rule = (("[MASK]", MASK_FRACTION), ("a random token", RANDOM_FRACTION), ("unchanged", 1 - MASK_FRACTION
                                                                              - RANDOM_FRACTION))
    named = {
        (("[MASK]", 0.8), ("unchanged", 0.1), ("a random token", 0.1)):
            "You swapped the two 10% shares: a chosen position with 0.8 <= u_action < 0.9 gets a random token, "
            "and one with u_action >= 0.9 keeps its own (yours did the opposite).",
        (("[MASK]", 0.1), ("a random token", 0.8), ("unchanged", 0.1)):
            "You swapped the shares of [MASK] and the random token (10/80/10): 80% of the chosen positions "
            "become [MASK] (u_action < 0.8) and 10% a random token (0.8 <= u_action < 0.9); 10% stay unchanged.",
    }
    actions = ("[MASK]", "a random token", "unchanged")
    layouts = list(named) + [tuple(zip(order, shares)) for order in itertools.permutations(actions)
                             for shares in ((0.8, 0.1, 0.1), (0.1, 0.8, 0.1), (0.1, 0.1, 0.8))]
    for layout in layouts:  # the right shares in the wrong places along u_action: say where yours went
        wrong = by_intervals(layout)
        if any(torch.equal(wrong, t) for t in [right_corrupted, *corrupted.values()]):
            continue  # the same tensor as another diagnosis (or as the right answer) on these inputs
        hint = named.get(layout) or (
            f"Your chosen positions get their actions in the wrong parts of [0, 1): yours look like "
            f"{intervals(layout)}; the rule is {intervals(rule)}.")
        corrupted[hint] = wrong
    return labels, corrupted


def check_mlm_mask(mlm_mask: Callable[..., tuple[Tensor, Tensor]]) -> Verdict:
    """Check ``mlm_mask(input_ids, u_choose, u_action, u_token, mask_token_id, special_ids, vocab_size, mask_prob)``.

    All tensors are ``(batch, seq)``; the three ``u_*`` are uniform numbers in ``[0, 1)``. The
    rules (those of :class:`transformer_lib.MLMCollator`):

    * a position is **chosen** when ``u_choose < mask_prob`` and its token is not in ``special_ids``;
    * a chosen position becomes ``mask_token_id`` when ``u_action < 0.8``, a random token when
      ``0.8 <= u_action < 0.9``, and keeps its token otherwise;
    * the random token is ``replacements[int(u_token * len(replacements))]``, where
      ``replacements`` are the ids in ``[0, vocab_size)`` not in ``special_ids``, in increasing order;
    * ``labels`` are the original token at the chosen positions and ``IGNORE_INDEX`` (-100) elsewhere.

    Returns ``(corrupted, labels)``. Prints ``Correct!`` and returns a true ``Verdict`` when right; returns a false one
    while the function raises NotImplementedError; otherwise raises :class:`ExerciseFailed` naming
    the mistake (special tokens or padding chosen, labels at unchosen positions, labels of 0 instead of
    -100 there, labels holding the corrupted tokens or only the [MASK] positions, the 80/10/10 split
    applied to every token, random tokens drawn from the special ids, the random or unchanged share
    missing, the shares swapped or in another order along ``u_action`` (10/80/10, the two 10% swapped),
    an input changed in place).
    """
    name = "mlm_mask"
    ids, u_choose, u_action, u_token = mlm_mask_inputs()
    passed = ids.clone()
    try:
        got = attempt(mlm_mask, passed, u_choose.clone(), u_action.clone(), u_token.clone(), MASK, list(SPECIAL_IDS),
                      VOCAB, MASK_PROB)
    except Exception as e:
        raise ExerciseFailed(f"{name} raised {type(e).__name__}: {e}\n(called with input_ids and u_* of shape "
                             f"{tuple(ids.shape)}, mask_token_id={MASK}, special_ids={list(SPECIAL_IDS)}, "
                             f"vocab_size={VOCAB}, mask_prob={MASK_PROB}).") from e
    if got is NOT_IMPLEMENTED:
        return pending(name)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(f"{name} should return a pair (corrupted, labels), but it returned {type(got).__name__}"
             + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else "") + ".")
    corrupted, labels = got
    expect_tensor(f"{name}'s corrupted input_ids", corrupted, ids.shape)
    expect_tensor(f"{name}'s labels", labels, ids.shape)
    for what, t in (("corrupted input_ids", corrupted), ("labels", labels)):
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            fail(f"{name}'s {what} should hold integer token ids (torch.long), got dtype {t.dtype}.")
    right_corrupted, right_labels = reference_mlm_mask(ids, u_choose, u_action, u_token, MASK, SPECIAL_IDS, VOCAB)
    label_mistakes, corrupted_mistakes = mlm_mask_mistakes(ids, u_choose, u_action, u_token)
    if not torch.equal(labels.long(), right_labels):
        _first_match(f"{name}'s labels", labels, right_labels, label_mistakes, "labels")
    if not torch.equal(corrupted.long(), right_corrupted):
        _first_match(f"{name}'s corrupted input_ids", corrupted, right_corrupted, corrupted_mistakes, "tokens")
    if not torch.equal(passed, ids):
        fail(f"{name} gives the right answer but changed its input_ids argument in place. Work on a copy "
             "(input_ids.clone()): the caller may still need the original batch.")
    chosen = int((right_labels != IGNORE_INDEX).sum())
    return correct(f"All {ids.numel()} positions agree: {chosen} chosen, of which "
                   f"{int((right_corrupted == MASK).sum())} became [MASK], the others a random token or themselves.")


# ------------------------------------------------------------------------------ the masked loss

D_MODEL, LOSS_VOCAB = 16, 66
LOSS_MASK = 65  # [MASK] in the check's batch: the chapter's 65 characters, then [MASK] = 65


class RecordingHead(nn.Module):
    """An output head ``(..., d_model) -> (..., vocab)`` that counts the positions it is run on."""

    def __init__(self, d_model: int, vocab: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.weight = nn.Parameter(0.6 * torch.randn(vocab, d_model, generator=g))
        self.bias = nn.Parameter(0.5 * torch.randn(vocab, generator=g))
        self.positions = 0

    def forward(self, h: Tensor) -> Tensor:
        if h.shape[-1] != self.weight.shape[1]:
            raise ValueError(f"the head expects (..., d_model={self.weight.shape[1]}) hidden states, got {tuple(h.shape)}")
        self.positions += h.numel() // h.shape[-1]
        return F.linear(h, self.weight, self.bias)


def masked_lm_loss_inputs(seed: int = 9) -> tuple[Tensor, Tensor, Tensor]:
    """``hidden (4, 10, 16)``, corrupted ``input_ids (4, 10)`` and ``labels (4, 10)`` with 9 chosen positions:
    7 became ``[MASK]`` (``LOSS_MASK``), one a random token, one kept its token."""
    g = torch.Generator().manual_seed(seed)
    batch, seq = 4, 10
    hidden = torch.randn(batch, seq, D_MODEL, generator=g)
    original = torch.randint(0, LOSS_MASK, (batch, seq), generator=g)  # characters, never [MASK]
    chosen = torch.zeros(batch, seq, dtype=torch.bool)
    for b, t in [(0, 1), (0, 7), (1, 3), (1, 4), (2, 0), (2, 9), (3, 2), (3, 5), (3, 8)]:
        chosen[b, t] = True
    corrupted = original.clone()
    corrupted[chosen] = LOSS_MASK
    corrupted[1, 4], corrupted[3, 8] = 17 if original[1, 4] != 17 else 18, original[3, 8]  # one random, one kept
    labels = torch.where(chosen, original, torch.full_like(original, IGNORE_INDEX))
    return hidden, corrupted, labels


def mask_only_hint(n_mask: int, n_chosen: int) -> str:
    return (f"Your loss covers only the {n_mask} positions whose input is [MASK] ({LOSS_MASK}), not all {n_chosen} "
            "chosen ones. A chosen position that got a random token (10%) or kept its own (10%) is predicted too: "
            "without them the model would only ever learn at [MASK], a token fine-tuning never shows it. Select the chosen positions by their "
            "labels, m = labels != -100, not by input_ids == [MASK].")


def masked_lm_loss_mistakes(hidden: Tensor, input_ids: Tensor, labels: Tensor, head: nn.Module) -> dict[str, Tensor]:
    vocab = LOSS_VOCAB
    m = labels != IGNORE_INDEX
    with torch.no_grad():
        logits_all = head(hidden)  # (batch, seq, vocab)
        logits = logits_all[m]  # (n_masked, vocab)
        everywhere = torch.where(m, labels, input_ids)
        at_mask = input_ids == LOSS_MASK
        return {
            mask_only_hint(int(at_mask.sum()), int(m.sum())):
                F.cross_entropy(logits_all[at_mask], labels[at_mask]),
            "You averaged over all batch x seq positions: the unchosen positions add nothing to the sum but count "
            "in the denominator. The loss is the mean over the chosen positions only (labels != -100).":
                F.cross_entropy(logits_all.reshape(-1, vocab), labels.reshape(-1), reduction="sum") / labels.numel(),
            "You averaged over all positions, scoring the unchosen ones against their input token. Only the chosen "
            "positions (labels != -100) are predicted; the others are not part of the loss.":
                F.cross_entropy(logits_all.reshape(-1, vocab), everywhere.reshape(-1)),
            "Your targets are the corrupted input_ids ([MASK] and the random tokens), so the model is asked to "
            "predict [MASK]. The targets are labels[labels != -100], the original tokens.":
                F.cross_entropy(logits, input_ids[m]),
            "You summed the losses over the chosen positions: the loss is their mean.":
                F.cross_entropy(logits, labels[m], reduction="sum"),
            "You applied a softmax before F.cross_entropy, which applies log_softmax itself: pass it the raw logits.":
                F.cross_entropy(logits.softmax(-1), labels[m]),
        }


def check_masked_lm_loss(masked_lm_loss_fn: Callable[[Tensor, Tensor, Tensor, nn.Module], Tensor]) -> Verdict:
    """Check ``masked_lm_loss(hidden, input_ids, labels, head) -> scalar``.

    ``hidden`` ``(batch, seq, d_model)`` is the encoder's output, ``input_ids`` ``(batch, seq)`` the
    corrupted input it was computed from, ``labels`` ``(batch, seq)`` the original token at the
    chosen positions and -100 elsewhere, ``head`` a module ``(..., d_model) -> (..., vocab)``. The
    answer selects the chosen positions (``labels != -100``), runs the head on them only, and
    returns the mean cross-entropy against their labels: ``tl.masked_lm_loss(head(hidden[m]), labels[m])``.

    Prints ``Correct!`` and returns a true ``Verdict`` when right; returns a false one while the function raises
    NotImplementedError; otherwise raises :class:`ExerciseFailed` naming the mistake (averaged over
    all positions, only the positions whose input is ``[MASK]``, an empty selection, the corrupted
    input as targets, no selection before the head, the inverted selection, a sum instead of the
    mean, a softmax before the cross-entropy). In the check's batch ``[MASK]`` is 65, as in the chapter.
    """
    name = "masked_lm_loss"
    hidden, input_ids, labels = masked_lm_loss_inputs()
    head = RecordingHead(D_MODEL, LOSS_VOCAB, seed=10)
    got = call(name, masked_lm_loss_fn, hidden, input_ids, labels, head)
    if got is NOT_IMPLEMENTED:
        return pending(name)
    seen = head.positions
    m = labels != IGNORE_INDEX
    n_masked, n_all = int(m.sum()), labels.numel()
    with torch.no_grad():
        expected = masked_lm_loss(head(hidden[m]), labels[m])
    expect_tensor(name, got, ())
    n_mask_inputs = int((input_ids == LOSS_MASK).sum())
    if not close(got, expected):
        if seen == 0:
            fail(f"{name} is not right yet. Your head ran on no position at all (an empty selection gives the mean "
                 f"of nothing, nan; your loss is {got.item():.4f}). Select the chosen positions by their labels, "
                 f"m = labels != -100 ({n_masked} here), and run the head on hidden[m].")
        if seen == n_mask_inputs:
            fail(f"{name} is not right yet. {mask_only_hint(n_mask_inputs, n_masked)}")
        if seen == n_all - n_masked:
            fail(f"{name} is not right yet. Your head ran on the {seen} positions where labels == -100: those are "
                 f"the ones *not* to predict. Select m = labels != -100 ({n_masked} positions).")
        _first_match(name, got, expected, masked_lm_loss_mistakes(hidden, input_ids, labels, head), "loss")
    if seen != n_masked:
        fail(f"{name} gives the right loss, but the head ran on {seen} positions instead of the {n_masked} chosen "
             f"ones: you forgot to select before the head (or ran it twice). Select h = hidden[labels != -100], "
             f"shape (n_masked, d_model), then apply the head: it is the biggest matrix multiply of a BERT with a "
             f"large vocabulary, and here it computed {seen - n_masked} rows more than the {n_masked} it needs.")
    return correct(f"Your loss ({got.item():.4f}) matches tl.masked_lm_loss, and the head ran on the {n_masked} "
                   f"chosen positions only, not all {n_all}.")
