"""Exercises for chapter 8, *BERT* (``book/08_bert.ipynb``).

* :func:`check_mlm_mask`: ``mlm_mask(input_ids, u_choose, u_action, u_token, mask_token_id, special_ids,
  vocab_size, mask_prob)``, BERT's masking of a batch, made deterministic by passing the uniform
  random numbers in: ``-> (corrupted input_ids, labels)``
* :func:`check_masked_lm_loss`: ``masked_lm_loss(hidden, input_ids, labels, head)``, the loss at the
  masked positions only, running the output head on those positions alone
* :func:`check_make_pair`: ``make_pair(a_ids, b_ids, cls_id, sep_id, max_len)``, one sentence pair as
  BERT reads it, ``[CLS] A [SEP] B [SEP]`` with its segment ids, cut to the window as
  ``tl.data.sentence_tasks.encode_pairs`` cuts it: ``-> (input_ids, token_type_ids)``

The inputs are chosen so that every common mistake gives a different answer. For the masking: a
batch with ``[CLS]`` / ``[SEP]`` / padding and a vocabulary of 40 whose special ids are the first
four (so a random replacement drawn from the whole vocabulary, or an index used as an id, shows),
some special positions with a small ``u_choose`` (so choosing them shows), and every chosen
action (``[MASK]``, random, unchanged) present. For the loss: the chapter's vocabulary (65
characters and ``[MASK]`` = 65), chosen positions that became ``[MASK]``, one that became a random
token and one left unchanged (so a loss over the ``[MASK]`` inputs alone shows), and a head that
records which positions it was run on. For the pair: A and B of distinct ids (so that a swap, or a
sentence cut at the wrong end, shows), three windows (one that fits, one that cuts both sentences with an
odd room, one with a short A whose room B must not take).
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.sentence_tasks import encode_pairs
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


# ------------------------------------------------------------------------------ a sentence pair

PAIR_CLS, PAIR_SEP = 66, 67  # the chapter's [CLS] and [SEP]: the ids after its 65 characters and [MASK]
# (a_ids, b_ids, max_len): a pair that fits; one cut at both sides, with an odd room (B gets the odd place);
# one whose A is short, so that B's half stays its own (it does not take the room A leaves)
PAIR_CASES = (
    (list(range(10, 15)), list(range(30, 34)), 16),
    (list(range(10, 19)), list(range(30, 38)), 14),
    (list(range(10, 12)), list(range(30, 42)), 14),
)


def pair_rooms(max_len: int) -> tuple[int, int]:
    """``(room_a, room_b)``: the most ids of A and of B that a pair of ``max_len`` tokens keeps."""
    room_a = (max_len - 3) // 2  # [CLS] and the two [SEP] take three places
    return room_a, max_len - 3 - room_a


def reference_make_pair(a_ids: Sequence[int], b_ids: Sequence[int], cls_id: int, sep_id: int,
                        max_len: int) -> tuple[Tensor, Tensor]:
    """The right answer: ``tl.data.sentence_tasks.encode_pairs`` on one pair, without its padding."""
    enc = encode_pairs([(list(a_ids), list(b_ids))], lambda ids: ids, cls_id, sep_id, max_len)
    n = int(enc["attention_mask"].sum())
    return enc["input_ids"][0, :n], enc["token_type_ids"][0, :n]


def _pair_call(a_ids: list[int], b_ids: list[int], max_len: int) -> str:
    return f"make_pair({a_ids}, {b_ids}, cls_id={PAIR_CLS}, sep_id={PAIR_SEP}, max_len={max_len})"


def _kept(x: list[int], source: list[int], name: str) -> str | None:
    """Which part of ``source`` the ids ``x`` are: 'all 9 ids of A', 'the first 5 ids of A', ...; None if
    they are not its start, its end or all of it."""
    n = len(x)
    if x == source:
        return f"all {n} ids of {name}"
    if n and x == source[:n]:
        return f"the first {n} ids of {name}"
    if n and x == source[-n:]:
        return f"the last {n} ids of {name}"
    if not n:
        return f"no id of {name}"
    return None


def _pair_ids_mistake(ids: list[int], a: list[int], b: list[int], max_len: int) -> str:
    """Name what is wrong with input_ids ``ids`` (not the right ones) for the pair ``a``, ``b``."""
    cls, sep = PAIR_CLS, PAIR_SEP
    room_a, room_b = pair_rooms(max_len)
    right, _ = reference_make_pair(a, b, cls, sep, max_len)
    right = right.tolist()
    full = [cls, *a, sep, *b, sep]
    rooms = (f"Each sentence gets its own half of the room, whatever the other one's length: "
             f"room_a = (max_len - 3) // 2 = {room_a} and room_b = max_len - 3 - room_a = {room_b} here "
             "(B gets the odd place).")
    if len(ids) == max_len > len(right) and ids[:len(right)] == right:
        return (f"Your input_ids are the right {len(right)} tokens followed by {max_len - len(right)} of "
                "padding. "
                f"make_pair returns one pair without padding, shape (n,) with n = {len(right)} here: "
                "st.encode_pairs pads a batch to seq_len, and a model fed one pair needs no padding.")
    # (with A inside its room, cutting the end is B taking A's room: the hint below names that)
    if len(full) > max_len and len(a) > room_a and ids in (full[:max_len], full[:max_len - 1] + [sep]):
        return (f"You cut the finished [CLS] A [SEP] B [SEP] to its first max_len = {max_len} tokens: that "
                "keeps the start of A (far from the seam) and loses the end of B"
                + (" and the last [SEP]" if ids[-1] != sep else "") + ". Cut A and B first (A keeps its end, "
                f"B its start), then add [CLS] and the [SEP]s. {rooms}")
    if len(full) > max_len and ids == full[-max_len:]:
        return (f"You kept the last max_len = {max_len} tokens of the finished [CLS] A [SEP] B [SEP], which "
                f"loses [CLS] and the start of A. Cut A and B first, then add [CLS] and the [SEP]s. {rooms}")
    if not ids or ids[0] != cls:
        if cls not in ids:
            return (f"Your input_ids have no [CLS] ({cls}): every BERT input starts with it, and its vector "
                    "is the one the NSP and classification heads read.")
        where = "at the end" if ids[-1] == cls else f"at position {ids.index(cls)}"
        return f"Your [CLS] ({cls}) is {where}: it is the first token, position 0, before A."
    n_sep = ids.count(sep)
    if n_sep < 2:
        which = ("both [SEP] are" if n_sep == 0 else "the [SEP] after B is" if ids[-1] != sep
                 else "the [SEP] between A and B is")
        return (f"Your input_ids have {n_sep} [SEP] ({sep}) instead of two: {which} missing. The pair is "
                "[CLS] A [SEP] B [SEP]: one [SEP] ends A, so the model sees where B starts, one ends B.")
    if n_sep > 2 or ids[-1] != sep:
        return (f"Your input_ids should be [CLS] A [SEP] B [SEP], exactly two [SEP] ({sep}), the second one "
                f"last; yours have {n_sep}" + ("" if ids[-1] == sep else ", and the last token is not [SEP]")
                + ".")
    i = ids.index(sep)
    x, y = ids[1:i], ids[i + 1:-1]  # what stands where A and B should
    if x and y and set(x) <= set(b) and set(y) <= set(a):
        return "You swapped A and B: the pair is [CLS] A [SEP] B [SEP], the first sentence first."
    kept_a, kept_b = _kept(x, a, "A"), _kept(y, b, "B")
    if kept_a is None or kept_b is None:
        return (f"Between [CLS] and the first [SEP] should be the last {room_a} ids of A (at most), and "
                f"between the two [SEP] the first {room_b} ids of B (at most); yours are {x} and {y}.")
    a_right, b_right = a[-room_a:], b[:room_b]
    hints = []
    if x != a_right:
        if len(x) > room_a:
            hints.append(f"Where A goes you have {kept_a}, more than its room of {room_a}"
                         + (": A was not cut." if x == a else "."))
        elif x == a[:len(x)] and len(a) > len(x):
            hints.append(f"Where A goes you have {kept_a}: A keeps its end, its last {room_a} ids, the "
                         "characters next to the seam that next-sentence prediction judges.")
        else:
            hints.append(f"Where A goes you have {kept_a}, instead of its last {len(a_right)}.")
    if y != b_right:
        if len(y) > room_b:
            hints.append(f"Where B goes you have {kept_b}, more than its room of {room_b}"
                         + (": B was not cut." if y == b else ": B took the room that A left."))
        elif y == b[-len(y):] and len(b) > len(y):
            hints.append(f"Where B goes you have {kept_b}: B keeps its start, its first {room_b} ids, the "
                         "characters next to the seam that next-sentence prediction judges.")
        else:
            hints.append(f"Where B goes you have {kept_b}, instead of its first {len(b_right)}.")
    return " ".join(["The pair is cut to the window the wrong way.", *hints, rooms])


def _pair_types_mistake(types: list[int], len_a: int, len_b: int) -> str:
    """Name what is wrong with token_type_ids ``types`` (right input_ids) for A, B of these kept lengths."""
    named = {
        "Your first [SEP], the one that ends A, has segment 1: it belongs to sentence A, segment 0 "
        "([CLS] A [SEP] all get 0).": [0] * (len_a + 1) + [1] * (len_b + 2),
        "Your last [SEP], the one that ends B, has segment 0: it belongs to sentence B, segment 1 "
        "(B [SEP] both get 1).": [0] * (len_a + 2) + [1] * len_b + [0],
        "Your first [SEP] has segment 1 and your last [SEP] segment 0: each [SEP] belongs to the sentence it "
        "ends (0 for [CLS] A [SEP], 1 for B [SEP]).": [0] * (len_a + 1) + [1] * (len_b + 1) + [0],
        "Your token_type_ids are 0 everywhere: B and its [SEP] are segment 1, which is how BERT tells the "
        "two sentences apart (its segment embedding).": [0] * (len_a + len_b + 3),
        "Your segments are the wrong way round: [CLS] A [SEP] is segment 0 and B [SEP] segment 1.":
            [1] * (len_a + 2) + [0] * (len_b + 1),
        "Your [CLS] has segment 1: it is segment 0, with sentence A.":
            [1] + [0] * (len_a + 1) + [1] * (len_b + 1),
    }
    for hint, wrong in named.items():
        if types == wrong:
            return hint
    right = [0] * (len_a + 2) + [1] * (len_b + 1)
    bad = [i for i, (t, r) in enumerate(zip(types, right)) if t != r]
    return (f"Your token_type_ids differ from the right ones at positions {bad}: 0 for [CLS] A [SEP], "
            "1 for B [SEP].")


def check_make_pair(make_pair: Callable[[list[int], list[int], int, int, int], tuple[Tensor, Tensor]],
                    ) -> Verdict:
    """Check ``make_pair(a_ids, b_ids, cls_id, sep_id, max_len) -> (input_ids, token_type_ids)``.

    ``a_ids`` and ``b_ids`` are lists of ids (what ``tok.encode`` returns). The answer is one pair as
    ``tl.data.sentence_tasks.encode_pairs`` makes it, without the padding: ``[CLS] A [SEP] B [SEP]``,
    ``input_ids`` and ``token_type_ids`` both ``(n,)`` ``torch.long``, segment 0 for ``[CLS] A [SEP]`` and 1
    for ``B [SEP]``; A keeps its last ``room_a = (max_len - 3) // 2`` ids and B its first
    ``room_b = max_len - 3 - room_a``, whatever the other's length.

    Tried on three pairs (``PAIR_CASES``): one that fits, one cut at both sides, one with a short A.
    Prints ``Correct!`` and returns a true ``Verdict`` when right; returns a false one while the function
    raises NotImplementedError; otherwise raises :class:`ExerciseFailed` naming the mistake (the first
    [SEP] in segment 1, the last in segment 0, other segment mistakes; [CLS] missing or not first; a [SEP]
    missing; A and B swapped; A keeping its start or B its end, a sentence not cut, B taking the room A
    leaves, the finished sequence cut instead of the sentences; padding; a list instead of a tensor, a
    dtype other than int64, a shape other than ``(n,)``; an argument changed in place). Raises
    ``TypeError`` when ``make_pair`` is not a function.
    """
    name = "make_pair"
    if not callable(make_pair):
        raise TypeError(f"check_make_pair needs your function make_pair itself, got a "
                        f"{type(make_pair).__name__}: call ex.check_make_pair(make_pair), "
                        "not ex.check_make_pair(make_pair(...)).")
    for a, b, max_len in PAIR_CASES:
        a_arg, b_arg = list(a), list(b)
        got = call(name, make_pair, a_arg, b_arg, PAIR_CLS, PAIR_SEP, max_len)
        if got is NOT_IMPLEMENTED:
            return pending(name)
        on = f"On {_pair_call(a, b, max_len)}: "
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            fail(f"{name} should return a pair (input_ids, token_type_ids), but it returned "
                 f"{type(got).__name__}"
                 + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else "") + ".")
        right_ids, right_types = reference_make_pair(a, b, PAIR_CLS, PAIR_SEP, max_len)
        for what, t in zip(("input_ids", "token_type_ids"), got):
            if isinstance(t, (list, tuple)):
                fail(f"{name} returned its {what} as a Python {type(t).__name__}: return a tensor, "
                     f"torch.tensor({what}_list) (the model's inputs are tensors of dtype torch.long).")
            if not isinstance(t, Tensor):
                fail(f"{name}'s {what} should be a torch.Tensor, but it is {type(t).__name__}.")
            if t.dtype != torch.long:
                fail(f"{name}'s {what} have dtype {t.dtype}; ids and segment ids are torch.long (int64), as "
                     "st.encode_pairs returns them: torch.tensor(list_of_ints) gives int64 by itself, or "
                     "pass dtype=torch.long.")
            if t.dim() != 1:
                fail(f"{name}'s {what} have shape {tuple(t.shape)}: one pair is a 1-D tensor, shape (n,) = "
                     f"{tuple(right_ids.shape)} here, without a batch dimension.")
        ids, types = got
        if len(ids) != len(types):
            fail(f"{on}your input_ids have {len(ids)} tokens but your token_type_ids {len(types)}: one "
                 "segment id per token.")
        if not torch.equal(ids, right_ids):
            fail(f"{name} is not right yet. {on}your input_ids are {ids.tolist()}, the right ones "
                 f"{right_ids.tolist()}. {_pair_ids_mistake(ids.tolist(), a, b, max_len)}")
        if not torch.equal(types, right_types):
            len_b = int(right_types.sum()) - 1
            fail(f"{name} is not right yet. {on}your input_ids are right; your token_type_ids are "
                 f"{types.tolist()}, the right ones {right_types.tolist()}. "
                 + _pair_types_mistake(types.tolist(), len(ids) - len_b - 3, len_b))
        if (a_arg, b_arg) != (a, b):
            fail(f"{name} gives the right pair but changed its a_ids or b_ids argument in place: build a new "
                 "list (or tensor); the caller may still need the sentences.")
    a, b, max_len = PAIR_CASES[1]
    room_a, room_b = pair_rooms(max_len)
    return correct(f"All {len(PAIR_CASES)} pairs agree with st.encode_pairs, including the one cut to "
                   f"max_len = {max_len}: A keeps its last {room_a} ids and B its first {room_b}, the seam "
                   "NSP judges.")
