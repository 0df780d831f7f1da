"""exercises.ch08: right answers pass, stubs are pending, each common mistake gets its own hint."""

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib.exercises import ch08 as ex
from transformer_lib.exercises._checking import ExerciseFailed


def stub(*args, **kwargs):
    raise NotImplementedError


# ------------------------------------------------------------------------------------ mlm_mask


def mask(input_ids, u_choose, u_action, u_token, mask_token_id, special_ids, vocab_size, mask_prob=0.15, *,
         exclude_special=True, choose_all=False, choose_above=False, labels_everywhere=False, labels_corrupted=False,
         labels_mask_only=False, labels_inverted=False, labels_zero=False, random_from_vocab=False,
         random_index=False, no_random=False, random_as_mask=False, no_unchanged=False, in_place=False):
    """A reader's masking, right by default, with each mistake as a switch."""
    special = torch.tensor(list(special_ids))
    maskable = ~torch.isin(input_ids, special)
    chosen = u_choose >= mask_prob if choose_above else u_choose < mask_prob
    if exclude_special:
        chosen = chosen & maskable
    chosen_labels = chosen & maskable if choose_above else chosen
    corrupt_where = maskable if choose_all else chosen
    mask_below, random_below = (0.9 if random_as_mask else 0.8), (1.0 if no_unchanged else 0.9)
    to_mask = corrupt_where & (u_action < mask_below)
    to_random = corrupt_where & (u_action >= mask_below) & (u_action < random_below)
    allowed = torch.ones(vocab_size, dtype=torch.bool)
    allowed[special] = False
    replacements = allowed.nonzero().squeeze(1)
    if random_from_vocab:
        random_ids = (u_token * vocab_size).long()
    elif random_index:
        random_ids = (u_token * len(replacements)).long()
    else:
        random_ids = replacements[(u_token * len(replacements)).long()]
    corrupted = input_ids if in_place else input_ids.clone()
    original = input_ids.clone()
    corrupted[to_mask] = mask_token_id
    if not no_random:
        corrupted[to_random] = random_ids[to_random]
    source = corrupted if labels_corrupted else original
    if labels_everywhere:
        labels = original.clone()
    elif labels_inverted:
        labels = torch.where(chosen_labels, torch.full_like(original, -100), original)
    else:
        where = chosen_labels & (u_action < 0.8) if labels_mask_only else chosen_labels
        labels = torch.where(where, source, torch.full_like(original, 0 if labels_zero else -100))
    return corrupted, labels


def test_mlm_mask_correct(capsys):
    assert ex.check_mlm_mask(mask).passed is True
    assert "Correct" in capsys.readouterr().out


def test_mlm_mask_reference_follows_the_collator_rules():
    """The reference agrees with tl.MLMCollator when given the collator's own random draws."""
    ids, _, _, _ = ex.mlm_mask_inputs()
    collator = tl.MLMCollator(ex.VOCAB, ex.MASK, special_ids=ex.SPECIAL_IDS, pad_token_id=ex.PAD, seed=3)
    g = torch.Generator().manual_seed(3)  # replay the collator's draws, in its order
    u_choose = torch.rand(ids.shape, generator=g)
    assert ((u_choose < 0.15) & ~torch.isin(ids, torch.tensor(ex.SPECIAL_IDS))).any()  # no forced extra choice
    u_action = torch.rand(ids.shape, generator=g)
    k = torch.randint(len(collator.replacements), ids.shape, generator=g)
    u_token = (k.double() + 0.5) / len(collator.replacements)  # the uniform that picks replacement k
    out = collator(ids)
    corrupted, labels = ex.reference_mlm_mask(ids, u_choose, u_action, u_token.float(), ex.MASK, ex.SPECIAL_IDS, ex.VOCAB)
    assert torch.equal(corrupted, out["input_ids"]) and torch.equal(labels, out["labels"])


def test_mlm_mask_stub_is_pending(capsys):
    assert ex.check_mlm_mask(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(exclude_special=False), r"Your labels also hold the padding / \[CLS\] / \[SEP\]"),
        (dict(labels_everywhere=True), r"Your labels hold a token at every position"),
        (dict(labels_corrupted=True), r"Your labels hold the corrupted tokens"),
        (dict(in_place=True, labels_corrupted=False), r"changed its input_ids argument in place"),
        (dict(labels_mask_only=True), r"Your labels cover only the positions that became \[MASK\]"),
        (dict(labels_inverted=True), r"Your labels are inverted"),
        (dict(labels_zero=True), r"Your labels are 0 at the positions that were not chosen\. 0 is a token id"),
        (dict(choose_above=True), r"u_choose >= mask_prob, about 85%"),
        (dict(choose_all=True), r"applied the 80/10/10 split to every token instead of only the chosen 15%"),
        (dict(random_from_vocab=True), r"Your random replacements can be special tokens"),
        (dict(random_index=True), r"an index into the allowed ids, not the id itself"),
        (dict(no_random=True), r"You skipped the random replacement"),
        (dict(random_as_mask=True), r"0\.8 <= u_action < 0\.9 became \[MASK\]"),
        (dict(no_unchanged=True), r"must keep their original token"),
    ],
)
def test_mlm_mask_mistakes(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_mlm_mask(lambda *a: mask(*a, **mistake))


def test_mlm_mask_labels_zero_written_as_a_reader_would():
    """labels = input_ids * chosen: the original where chosen, 0 elsewhere."""
    def fn(ids, uc, ua, ut, m, sp, v, p):
        corrupted, labels = mask(ids, uc, ua, ut, m, sp, v, p)
        chosen = labels != -100
        return corrupted, ids * chosen

    with pytest.raises(ExerciseFailed, match=r"Put IGNORE_INDEX \(-100\) there: F\.cross_entropy skips that label"):
        ex.check_mlm_mask(fn)


def test_mlm_mask_specials_corrupted_with_right_labels():
    def fn(ids, uc, ua, ut, m, sp, v, p):
        corrupted, _ = mask(ids, uc, ua, ut, m, sp, v, p, exclude_special=False)
        _, labels = mask(ids, uc, ua, ut, m, sp, v, p)
        return corrupted, labels

    with pytest.raises(ExerciseFailed, match=r"You also changed padding / \[CLS\] / \[SEP\] positions"):
        ex.check_mlm_mask(fn)


def test_mlm_mask_split_over_all_tokens_including_specials():
    def fn(ids, uc, ua, ut, m, sp, v, p):
        corrupted, labels = mask(ids, uc, ua, ut, m, sp, v, p)
        corrupted = ids.clone()
        corrupted[ua < 0.8] = m
        rnd = (ua >= 0.8) & (ua < 0.9)
        corrupted[rnd] = (ut[rnd] * 36).long() + 4
        return corrupted, labels

    with pytest.raises(ExerciseFailed, match=r"to every token \(special ones included\)"):
        ex.check_mlm_mask(fn)


def test_mlm_mask_mistakes_are_distinguishable():
    """Every mistake differs from the right answer and from every other mistake of its kind."""
    ids, uc, ua, ut = ex.mlm_mask_inputs()
    right_c, right_l = ex.reference_mlm_mask(ids, uc, ua, ut, ex.MASK, ex.SPECIAL_IDS, ex.VOCAB)
    labels, corrupted = ex.mlm_mask_mistakes(ids, uc, ua, ut)
    for right, mistakes in ((right_l, labels), (right_c, corrupted)):
        values = list(mistakes.values())
        assert all(not torch.equal(v, right) for v in values)
        assert all(not torch.equal(a, b) for i, a in enumerate(values) for b in values[i + 1:])


def test_mlm_mask_unknown_mistake_reports_positions():
    def fn(*a):
        corrupted, labels = mask(*a)
        labels = labels.clone()
        labels[0, 3] = 7 if labels[0, 3] != 7 else 8
        return corrupted, labels

    with pytest.raises(ExerciseFailed, match=r"wrong labels at 1 of 96 positions \(first ones: \(0, 3\)\)"):
        ex.check_mlm_mask(fn)


@pytest.mark.parametrize(
    "answer, message",
    [
        (lambda ids, *a: ids, r"should return a pair \(corrupted, labels\)"),
        (lambda ids, *a: (ids, ids, ids), r"pair \(corrupted, labels\), but it returned tuple of length 3"),
        (lambda ids, *a: (ids[:, :-1], ids), r"corrupted input_ids should return shape \(6, 16\)"),
        (lambda ids, *a: (ids, ids[None]), r"labels should return shape \(6, 16\)"),
        (lambda ids, *a: (ids.float(), ids), r"should hold integer token ids"),
    ],
)
def test_mlm_mask_wrong_shape_or_type(answer, message):
    with pytest.raises(ExerciseFailed, match=message):
        ex.check_mlm_mask(answer)


def test_mlm_mask_error_in_reader_code_is_reported():
    def broken(ids, *a):
        return ids @ ids

    with pytest.raises(ExerciseFailed, match=r"mlm_mask raised RuntimeError"):
        ex.check_mlm_mask(broken)


# ------------------------------------------------------------------------------ masked_lm_loss


def loss(hidden, input_ids, labels, head, *, select=True, inverted=False, all_positions=False,
         all_with_inputs=False, corrupted_targets=False, reduction="mean", softmax=False, mask_token=None):
    """A reader's masked loss, right by default, with each mistake as a switch.

    ``mask_token``: select the positions whose input is that id instead of labels != -100."""
    m = labels != -100 if mask_token is None else input_ids == mask_token
    if inverted:
        m = ~m
        return F.cross_entropy(head(hidden[m]), input_ids[m])
    if all_positions:
        logits = head(hidden).flatten(0, 1)
        return F.cross_entropy(logits, labels.flatten(), reduction="sum") / labels.numel()
    if all_with_inputs:
        return F.cross_entropy(head(hidden).flatten(0, 1), torch.where(m, labels, input_ids).flatten())
    logits = head(hidden[m]) if select else head(hidden)[m]
    if softmax:
        logits = logits.softmax(-1)
    targets = input_ids[m] if corrupted_targets else labels[m]
    return F.cross_entropy(logits, targets, reduction=reduction)


def test_masked_lm_loss_correct(capsys):
    assert ex.check_masked_lm_loss(loss).passed is True
    assert "Correct" in capsys.readouterr().out


def test_masked_lm_loss_correct_with_the_library():
    fn = lambda h, ids, labels, head: tl.masked_lm_loss(head(h[labels != -100]), labels[labels != -100])  # noqa: E731
    assert ex.check_masked_lm_loss(fn).passed is True


def test_masked_lm_loss_stub_is_pending(capsys):
    assert ex.check_masked_lm_loss(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(select=False), r"the head ran on 40 positions instead of the 9 chosen ones: you forgot to select"),
        (dict(all_positions=True), r"You averaged over all batch x seq positions"),
        (dict(all_with_inputs=True), r"You averaged over all positions, scoring the unchosen ones"),
        (dict(corrupted_targets=True), r"Your targets are the corrupted input_ids"),
        (dict(inverted=True), r"Your head ran on the 31 positions where labels == -100"),
        (dict(reduction="sum"), r"You summed the losses over the chosen positions"),
        (dict(softmax=True), r"You applied a softmax before F\.cross_entropy"),
        (dict(mask_token=65), r"Your loss covers only the 7 positions whose input is \[MASK\] \(65\), not all 9 chosen"),
        (dict(mask_token=65, select=False), r"covers only the 7 positions whose input is \[MASK\]"),
        (dict(mask_token=103), r"Your head ran on no position at all \(an empty selection gives the mean of nothing"),
    ],
)
def test_masked_lm_loss_mistakes(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_masked_lm_loss(lambda *a: loss(*a, **mistake))


def test_masked_lm_loss_mistakes_are_distinguishable():
    hidden, ids, labels = ex.masked_lm_loss_inputs()
    head = ex.RecordingHead(ex.D_MODEL, ex.LOSS_VOCAB, seed=10)
    m = labels != -100
    right = F.cross_entropy(head(hidden[m]), labels[m])
    values = list(ex.masked_lm_loss_mistakes(hidden, ids, labels, head).values())
    assert all(abs(v - right) > 1e-3 for v in values)
    assert all(abs(a - b) > 1e-3 for i, a in enumerate(values) for b in values[i + 1:])
    assert (ids[m] != labels[m]).sum() == m.sum() - 1  # one chosen position kept its token
    assert (ids == ex.LOSS_MASK).sum() == m.sum() - 2  # and one became a random token: 7 [MASK] of 9 chosen
    assert not (labels == ex.LOSS_MASK).any() and ex.LOSS_MASK == ex.LOSS_VOCAB - 1  # the chapter's [MASK]


def test_masked_lm_loss_unknown_mistake_reports_the_values():
    with pytest.raises(ExerciseFailed, match=r"wrong loss: expected \d+\.\d{4}, got"):
        ex.check_masked_lm_loss(lambda *a: loss(*a) + 0.1)


@pytest.mark.parametrize(
    "answer, message",
    [
        (lambda *a: loss(*a, reduction="none"), r"masked_lm_loss should return shape \(\), but it returned \(9,\)"),
        (lambda *a: loss(*a).item(), r"should return a torch\.Tensor, but it returned float"),
    ],
)
def test_masked_lm_loss_wrong_shape(answer, message):
    with pytest.raises(ExerciseFailed, match=message):
        ex.check_masked_lm_loss(answer)


def mask_by_intervals(layout):
    """The right choice and labels, with the chosen positions' actions laid out along u_action as
    ``layout`` says: (action, share) pairs, action "mask", "random" or "keep"."""
    def fn(ids, uc, ua, ut, m, sp, v, p):
        _, labels = ex.reference_mlm_mask(ids, uc, ua, ut, m, sp, v, p)
        chosen, out, low = labels != -100, ids.clone(), 0.0
        replacements = torch.tensor([i for i in range(v) if i not in sp])
        for action, share in layout:
            hit = chosen & (ua >= low) & (ua < low + share)
            low += share
            if action == "mask":
                out[hit] = m
            elif action == "random":
                out[hit] = replacements[(ut[hit] * len(replacements)).long()]
        return out, labels
    return fn


@pytest.mark.parametrize("layout, hint", [
    ((("mask", 0.8), ("keep", 0.1), ("random", 0.1)), r"You swapped the two 10% shares"),
    ((("mask", 0.1), ("random", 0.8), ("keep", 0.1)), r"swapped the shares of \[MASK\] and the random token"),
    ((("random", 0.1), ("mask", 0.8), ("keep", 0.1)),
     r"yours look like a random token where u_action < 0\.1, \[MASK\] where 0\.1 <= u_action < 0\.9"),
])
def test_mlm_mask_shares_in_the_wrong_places_are_named(layout, hint):
    """The old check said only 'wrong tokens at 6 of 96 positions' for these."""
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_mlm_mask(mask_by_intervals(layout))


def test_mlm_mask_right_layout_passes():
    assert ex.check_mlm_mask(mask_by_intervals((("mask", 0.8), ("random", 0.1), ("keep", 0.1)))).passed


# ------------------------------------------------------------------------------ make_pair


def pair(a_ids, b_ids, cls_id, sep_id, max_len, *, first_sep_1=False, last_sep_0=False, all_zero=False,
         types_inverted=False, no_cls=False, cls_last=False, no_first_sep=False, no_last_sep=False, swap=False,
         a_start=False, b_end=False, no_cut=False, b_takes_rest=False, round_up=False, cut_whole=False,
         keep_tail=False, pad=False, as_list=False, dtype=torch.long, batch_dim=False, one_tensor=False,
         in_place=False):
    """A reader's make_pair, right by default, with each mistake as a switch."""
    if swap:
        a_ids, b_ids = b_ids, a_ids
    room_a = (max_len - 3 + round_up) // 2
    room_b = max_len - 3 - room_a
    if b_takes_rest:
        room_b = max_len - 3 - min(room_a, len(a_ids))
    a = a_ids if no_cut or cut_whole or keep_tail else a_ids[:room_a] if a_start else a_ids[-room_a:]
    b = b_ids if no_cut or cut_whole or keep_tail else b_ids[-room_b:] if b_end else b_ids[:room_b]
    if in_place:
        a_ids.append(0)
    ids = ([] if no_cls else [cls_id]) + a + ([] if no_first_sep else [sep_id]) + b
    ids += ([] if no_last_sep else [sep_id]) + ([cls_id] if cls_last else [])
    types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    if first_sep_1:
        types[len(a) + 1] = 1
    if last_sep_0:
        types[-1] = 0
    if all_zero:
        types = [0] * len(types)
    if types_inverted:
        types = [1 - t for t in types]
    types = types[:len(ids)]
    if cut_whole:
        ids, types = ids[:max_len], types[:max_len]
    if keep_tail:
        ids, types = ids[-max_len:], types[-max_len:]
    if pad:
        ids, types = ids + [0] * (max_len - len(ids)), types + [0] * (max_len - len(types))
    if as_list:
        return ids, types
    if one_tensor:
        return torch.tensor(ids)
    out = torch.tensor(ids, dtype=dtype), torch.tensor(types, dtype=dtype)
    return tuple(t[None] for t in out) if batch_dim else out


def test_make_pair_correct(capsys):
    assert ex.check_make_pair(pair).passed is True
    assert "Correct" in capsys.readouterr().out


def test_make_pair_reference_is_the_library_on_one_pair():
    """The check's answer is encode_pairs' row without its padding, and the chapter's rule by hand."""
    for a, b, max_len in ex.PAIR_CASES:
        ids, types = ex.reference_make_pair(a, b, 66, 67, max_len)
        by_hand_ids, by_hand_types = pair(list(a), list(b), 66, 67, max_len)
        assert torch.equal(ids, by_hand_ids) and torch.equal(types, by_hand_types)
        enc = tl.data.sentence_tasks.encode_pairs([(a, b)], list, 66, 67, max_len)
        assert torch.equal(enc["input_ids"][0, :len(ids)], ids) and enc["attention_mask"][0, len(ids):].sum() == 0
        assert ids.dtype == types.dtype == torch.long and len(ids) <= max_len


def test_make_pair_stub_is_pending(capsys):
    assert ex.check_make_pair(stub).passed is False
    assert "Not implemented yet: write make_pair" in capsys.readouterr().out


PAIR_MISTAKES = [
    (dict(first_sep_1=True), r"Your first \[SEP\], the one that ends A, has segment 1"),
    (dict(last_sep_0=True), r"Your last \[SEP\], the one that ends B, has segment 0"),
    (dict(first_sep_1=True, last_sep_0=True), r"Your first \[SEP\] has segment 1 and your last \[SEP\] segment 0"),
    (dict(all_zero=True), r"Your token_type_ids are 0 everywhere"),
    (dict(types_inverted=True), r"Your segments are the wrong way round"),
    (dict(no_cls=True), r"Your input_ids have no \[CLS\] \(66\)"),
    (dict(no_cls=True, cls_last=True), r"Your \[CLS\] \(66\) is at the end"),
    (dict(no_first_sep=True), r"1 \[SEP\] \(67\) instead of two: the \[SEP\] between A and B is missing"),
    (dict(no_last_sep=True), r"1 \[SEP\] \(67\) instead of two: the \[SEP\] after B is missing"),
    (dict(no_first_sep=True, no_last_sep=True), r"0 \[SEP\] \(67\) instead of two: both \[SEP\] are missing"),
    (dict(swap=True), r"You swapped A and B"),
    (dict(a_start=True), r"Where A goes you have the first 5 ids of A: A keeps its end, its last 5 ids"),
    (dict(b_end=True), r"Where B goes you have the last 6 ids of B: B keeps its start, its first 6 ids"),
    (dict(a_start=True, b_end=True), r"the first 5 ids of A: A keeps its end.*the last 6 ids of B: B keeps its start"),
    (dict(no_cut=True), r"all 9 ids of A, more than its room of 5: A was not cut\..*all 8 ids of B.*B was not cut"),
    (dict(b_takes_rest=True), r"the first 9 ids of B, more than its room of 6: B took the room that A left"),
    (dict(round_up=True), r"the last 6 ids of A, more than its room of 5.*the first 5 ids of B, instead of its first 6"),
    (dict(cut_whole=True), r"You cut the finished \[CLS\] A \[SEP\] B \[SEP\] to its first max_len = 14 tokens"),
    (dict(keep_tail=True), r"You kept the last max_len = 14 tokens .* which loses \[CLS\]"),
    (dict(pad=True), r"the right 12 tokens followed by 4 of padding\. make_pair returns one pair without padding"),
    (dict(as_list=True), r"returned its input_ids as a Python list: return a tensor"),
    (dict(dtype=torch.int32), r"input_ids have dtype torch\.int32; ids and segment ids are torch\.long \(int64\)"),
    (dict(dtype=torch.float32), r"input_ids have dtype torch\.float32"),
    (dict(batch_dim=True), r"input_ids have shape \(1, 12\): one pair is a 1-D tensor, shape \(n,\) = \(12,\)"),
    (dict(one_tensor=True), r"should return a pair \(input_ids, token_type_ids\), but it returned Tensor"),
    (dict(in_place=True), r"gives the right pair but changed its a_ids or b_ids argument in place"),
]


@pytest.mark.parametrize("mistake, hint", PAIR_MISTAKES, ids=[",".join(m) for m, _ in PAIR_MISTAKES])
def test_make_pair_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_make_pair(lambda *a: pair(*a, **mistake))


def test_make_pair_mistakes_give_different_answers():
    """On the check's pairs each content slip gives its own (input_ids, token_type_ids): no two slips, and no
    slip and the right answer, agree on all three pairs."""
    content = [m for m, _ in PAIR_MISTAKES if not ({"as_list", "dtype", "batch_dim", "one_tensor", "in_place"} & set(m))]

    def answers(**mistake):
        return tuple((tuple(i.tolist()), tuple(t.tolist())) for i, t in
                     (pair(list(a), list(b), 66, 67, n, **mistake) for a, b, n in ex.PAIR_CASES))

    seen = {answers(): "right"}
    for m in content:
        got = answers(**m)
        assert got not in seen, f"{m} gives the same answers as {seen[got]}"
        seen[got] = m


def test_make_pair_cannot_pass_a_wrong_answer():
    """Any one id or segment id changed, in any of the three pairs, is caught (no silent pass)."""
    for case in range(len(ex.PAIR_CASES)):
        n = len(ex.reference_make_pair(*ex.PAIR_CASES[case][:2], 66, 67, ex.PAIR_CASES[case][2])[0])
        for which in range(2):
            for pos in range(n):
                def wrong(a, b, cls, sep, max_len):
                    ids, types = pair(a, b, cls, sep, max_len)
                    if (a, b, max_len) == tuple(ex.PAIR_CASES[case]):
                        out = (ids, types)[which].clone()
                        out[pos] = 1 - out[pos] if which else out[pos] + 1
                        return (out, types) if which == 0 else (ids, out)
                    return ids, types

                with pytest.raises(ExerciseFailed, match="make_pair"):
                    ex.check_make_pair(wrong)


def test_make_pair_unknown_content_is_shown():
    def fn(a, b, cls, sep, max_len):
        ids, types = pair(a, b, cls, sep, max_len)
        ids[1] = 99
        return ids, types

    with pytest.raises(ExerciseFailed, match=r"On make_pair\(\[10, 11, 12, 13, 14\], \[30, 31, 32, 33\], cls_id=66, "
                                              r"sep_id=67, max_len=16\): your input_ids are \[66, 99, "):
        ex.check_make_pair(fn)


def test_make_pair_types_length_and_error_in_reader_code():
    with pytest.raises(ExerciseFailed, match=r"input_ids have 12 tokens but your token_type_ids 11"):
        ex.check_make_pair(lambda *a: (pair(*a)[0], pair(*a)[1][:-1]))
    with pytest.raises(ExerciseFailed, match=r"make_pair raised TypeError"):
        ex.check_make_pair(lambda a, b, cls, sep, max_len: torch.tensor(a) + "x")


@pytest.mark.parametrize("bad", [None, 3, "make_pair", (torch.tensor([66, 67]), torch.tensor([0, 0]))])
def test_make_pair_check_needs_a_function(bad):
    with pytest.raises(TypeError, match=r"check_make_pair needs your function make_pair itself, got a "):
        ex.check_make_pair(bad)
