"""exercises.ch09: each check accepts a right answer, waits for a stub, and names each known mistake."""

import math

import pytest
import torch

import transformer_lib as tl
from transformer_lib.exercises import ch09 as ex
from transformer_lib.exercises._checking import ExerciseFailed

# ---------------------------------------------------------------- (a) teacher forcing, written independently


def tf_lists(y, bos, eos):
    """Plain Python lists, then tensors."""
    seq = [bos] + y.tolist() + [eos]
    return torch.tensor(seq[:-1]), torch.tensor(seq[1:])


def test_teacher_forcing_right_answer_passes(capsys):
    assert ex.check_teacher_forcing(tf_lists).passed is True
    assert "Correct" in capsys.readouterr().out


def test_teacher_forcing_torch_answer_passes():
    def tf_torch(y, bos, eos):
        return torch.cat([torch.tensor([bos]), y]), torch.cat([y, torch.tensor([eos])])

    assert ex.check_teacher_forcing(tf_torch).passed is True
    assert ex.check_teacher_forcing(lambda y, b, e: list(tf_torch(y, b, e))).passed is True  # a list of two is fine too


def test_teacher_forcing_stub_is_pending(capsys):
    def stub(y, bos_id, eos_id):
        raise NotImplementedError

    assert ex.check_teacher_forcing(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


def mistake(kind):
    def tf(y, bos, eos):
        y = y.tolist()
        tgt_in, tgt_out = {
            "no shift, BOS": ([bos] + y, [bos] + y),
            "no shift, EOS": (y + [eos], y + [eos]),
            "no shift, both ends": ([bos] + y + [eos], [bos] + y + [eos]),
            "swapped": (y + [eos], [bos] + y),
            "dropped last": ([bos] + y[:-1], y),
            "shift by two": ([bos] + y, y[1:] + [eos]),
            "BOS in targets": ([bos] + y, [bos] + y + [eos]),
            "EOS in inputs": ([bos] + y + [eos], y + [eos]),
            "no BOS": (y, y + [eos]),
            "no EOS": ([bos] + y, y),
            "fixed width 6": (([bos] + y + [0] * 5)[:6], (y + [eos] + [0] * 5)[:6]),
        }[kind]
        return torch.tensor(tgt_in), torch.tensor(tgt_out)

    return tf


@pytest.mark.parametrize(
    "kind, hint",
    [
        ("no shift, BOS", r"there is no shift \(BOS is an input, never a target\)"),
        ("no shift, EOS", r"there is no shift \(EOS is a target, never an input\)"),
        ("no shift, both ends", "there is no shift"),
        ("swapped", "You swapped them"),
        ("dropped last", "without its last token"),
        ("shift by two", "shifted by two"),
        ("BOS in targets", "tgt_out starts with BOS"),
        ("EOS in inputs", "tgt_in contains EOS"),
        ("no BOS", "no BOS in front"),
        ("no EOS", "no EOS at the end"),
    ],
)
def test_teacher_forcing_mistakes_are_named(kind, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_teacher_forcing(mistake(kind))


def test_teacher_forcing_unknown_error_shows_both():
    with pytest.raises(ExerciseFailed, match=r"Expected tgt_in = \[11, 4, 0\]"):
        ex.check_teacher_forcing(mistake("fixed width 6"))  # right for the long y, wrong for the short one
    with pytest.raises(ExerciseFailed, match="tgt_out differs"):
        ex.check_teacher_forcing(lambda y, b, e: (tf_lists(y, b, e)[0], tf_lists(y, b, e)[1] + 1))


def test_teacher_forcing_wrong_types_and_shapes():
    with pytest.raises(ExerciseFailed, match="a pair"):
        ex.check_teacher_forcing(lambda y, b, e: tf_lists(y, b, e)[0])
    with pytest.raises(ExerciseFailed, match="torch.Tensor"):
        ex.check_teacher_forcing(lambda y, b, e: ([b] + y.tolist(), y.tolist() + [e]))
    with pytest.raises(ExerciseFailed, match="integer token ids"):
        ex.check_teacher_forcing(lambda y, b, e: tuple(t.float() for t in tf_lists(y, b, e)))
    with pytest.raises(ExerciseFailed, match=r"1-D like y.*\(1, 6\)"):
        ex.check_teacher_forcing(lambda y, b, e: tuple(t[None] for t in tf_lists(y, b, e)))


# ---------------------------------------------------------------- (b) greedy decoding, written independently


def greedy_full_forward(model, src, bos, eos, new):
    """Re-run the whole model on (src, out) each step; finished rows get EOS."""
    out = torch.full((src.shape[0], 1), bos)
    finished = torch.zeros(src.shape[0], dtype=torch.bool)
    with torch.no_grad():
        for _ in range(new):
            token = model(src, out)[:, -1, :].argmax(-1)
            token[finished] = eos
            finished = finished | (token == eos)
            out = torch.cat([out, token[:, None]], dim=1)
    return out


def greedy_row_by_row(model, src, bos, eos, new):
    """One source at a time, Python lists."""
    rows = []
    with torch.no_grad():
        for s in src:
            memory = model.encode(s[None])
            seq = [bos]
            for _ in range(new):
                seq.append(eos if seq[-1] == eos and len(seq) > 1 else int(model.decode(torch.tensor([seq]), memory)[0, -1].argmax()))
            rows.append(seq)
    return torch.tensor(rows)


@pytest.mark.slow
def test_check_model_makes_the_mistakes_distinguishable():
    model, src = ex.greedy_check_model()
    bos, eos, new = ex.GREEDY_BOS, ex.GREEDY_EOS, ex.GREEDY_NEW
    free = model.generate(src, bos, new)[:, 1:].tolist()
    firsts = [row.index(eos) for row in free]  # every row emits EOS ...
    assert max(firsts) < new - 1 and len(set(firsts)) >= 2  # ... before the end, at different steps
    assert any(any(t != eos for t in row[f + 1:]) for row, f in zip(free, firsts))  # and would go on without a stop
    assert not any(bos in row for row in free)
    out = model.generate(src, bos, new, eos)
    with torch.no_grad():
        top2 = model(src, out[:, :-1]).topk(2, dim=-1).values
    assert (top2[..., 0] - top2[..., 1]).min() > 0.01  # no near-ties: any correct loop gives the same argmax


def test_check_model_leaves_the_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ex.greedy_check_model()
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.slow
@pytest.mark.parametrize("fn", [greedy_full_forward, greedy_row_by_row], ids=["full-forward", "row-by-row"])
def test_greedy_right_answers_pass(fn, capsys):
    assert ex.check_greedy_decode(fn).passed is True
    assert "Correct" in capsys.readouterr().out


@pytest.mark.slow
def test_greedy_library_generate_passes():
    assert ex.check_greedy_decode(lambda m, s, b, e, n: m.generate(s, b, n, e)).passed is True


@pytest.mark.slow
def test_greedy_stub_is_pending(capsys):
    def stub(model, src_ids, bos_id, eos_id, max_new_tokens):
        raise NotImplementedError

    assert ex.check_greedy_decode(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


def greedy_mistake(kind):
    def fn(model, src, bos, eos, new):
        memory = model.encode(src)
        out = torch.full((src.shape[0], 1), bos)
        preds = []
        done = torch.zeros(src.shape[0], dtype=torch.bool)
        with torch.no_grad():
            for _ in range(new):
                if kind == "never fed back":
                    logits = model.decode(out[:, :1], memory)
                elif kind == "newest token only":
                    logits = model.decode(out[:, -1:], memory)
                elif kind == "source and target swapped":
                    logits = model(out, src)
                else:
                    logits = model.decode(out, memory)
                token = logits[:, 0 if kind == "first position" else -1].argmax(-1)
                if kind != "no eos":
                    token = torch.where(done, 0 if kind == "pad with 0" else eos, token)
                    done |= token == eos
                preds.append(token)
                if kind != "forgot append":
                    out = torch.cat([out, token[:, None]], dim=1)
                if kind == "break when all done" and done.all():
                    break
                if kind == "break when any done" and done.any():
                    break
        if kind == "never fed back":
            return torch.cat([out[:, :1], torch.stack(preds, dim=1)], dim=1)
        if kind == "no bos":
            return out[:, 1:]
        if kind == "rows shuffled":
            return torch.cat([out[:, :1], out[:, 1:].flip(0)], dim=1)
        return out

    return fn


@pytest.mark.parametrize(
    "kind, hint",
    [
        ("forgot append", "only the BOS column"),
        ("no bos", "without the BOS column"),
        ("first position", r"logits\[:, 0\]"),
        ("never fed back", r"decoding \[BOS\] alone"),
        ("no eos", "did not stop at EOS"),
        ("pad with 0", "keep emitting eos_id"),
        ("break when all done", "stopped after 5 new tokens"),
        ("break when any done", "stopped after 3 new tokens"),
        ("rows shuffled", r"other tokens than greedy decoding(.|\n)*Expected:"),
        # the old check answered both with "take the argmax over the vocabulary"
        ("newest token only", r"reads only the newest token at each step"),
        ("source and target swapped", r"You swapped source and target: model\(out, src_ids\)"),
    ],
)
@pytest.mark.slow
def test_greedy_mistakes_are_named(kind, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_greedy_decode(greedy_mistake(kind))


@pytest.mark.slow
def test_greedy_wrong_types_and_shapes():
    with pytest.raises(ExerciseFailed, match="integer token ids"):
        ex.check_greedy_decode(lambda m, s, b, e, n: greedy_full_forward(m, s, b, e, n).float())
    with pytest.raises(ExerciseFailed, match="torch.Tensor"):
        ex.check_greedy_decode(lambda m, s, b, e, n: greedy_full_forward(m, s, b, e, n).tolist())
    with pytest.raises(ExerciseFailed, match=r"shape \(batch, 1 \+ max_new_tokens\) = \(4, 9\).*\(9, 4\)"):
        ex.check_greedy_decode(lambda m, s, b, e, n: greedy_full_forward(m, s, b, e, n).T)


# ---------------------------------------------------------------- (c) cross-attention, written independently

def cross_attention(attn, x, memory, memory_mask, *, queries="x", keys_values="memory", mask="keys",
                    scale="d_head", softmax_dim=-1, w_o=True, split=True):
    """A reader's cross-attention, right by default, each mistake a switch; einsum and view, not rearrange."""
    b, h = x.shape[0], attn.n_heads if split else 1
    d = attn.d_model // h

    def heads(t):  # (b, s, d_model) -> (b, h, s, d)
        return t.view(b, t.shape[1], h, d).transpose(1, 2)

    q_src = {"x": x, "memory": memory}[queries]
    kv_src = {"x": x, "memory": memory}[keys_values]
    q, k, v = heads(attn.W_Q(q_src)), heads(attn.W_K(kv_src)), heads(attn.W_V(kv_src))
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / {"d_head": math.sqrt(d), "d_model": math.sqrt(attn.d_model),
                                                      "none": 1.0, "d_head_plain": d}[scale]
    real = memory_mask == 1  # (b, S)
    if mask == "keys":
        scores = scores.masked_fill(~real[:, None, None, :], float("-inf"))
    elif mask == "queries":
        scores = scores.masked_fill(~real[:, None, :, None], float("-inf"))
    elif mask == "causal":
        scores = scores.masked_fill(~real[:, None, None, :], float("-inf"))
        scores = scores.masked_fill(torch.triu(torch.ones_like(scores, dtype=torch.bool), 1), float("-inf"))
    elif mask == "inverted":
        scores = scores.masked_fill(real[:, None, None, :], float("-inf"))
    elif mask == "zero":
        scores = torch.where(real[:, None, None, :], scores, torch.zeros(()))
    weights = torch.softmax(scores, dim=softmax_dim)
    if mask == "after":
        weights = weights * real[:, None, None, :].float()
    out = (weights @ v).transpose(1, 2).reshape(b, -1, attn.d_model)
    return attn.W_O(out) if w_o else out


def test_cross_attention_right_answer_passes(capsys):
    assert ex.check_cross_attention(cross_attention).passed is True
    assert "Correct" in capsys.readouterr().out


def test_cross_attention_via_library_pieces_passes():
    def via_sdpa(attn, x, memory, memory_mask):
        split = lambda t: t.view(t.shape[0], t.shape[1], attn.n_heads, attn.d_head).transpose(1, 2)  # noqa: E731
        out, _ = tl.scaled_dot_product_attention(split(attn.W_Q(x)), split(attn.W_K(memory)),
                                                 split(attn.W_V(memory)), tl.padding_mask(memory_mask))
        return attn.W_O(out.transpose(1, 2).reshape(x.shape))

    assert ex.check_cross_attention(via_sdpa).passed is True


def test_cross_attention_stub_is_pending(capsys):
    def stub(attn, x, memory, memory_mask):
        raise NotImplementedError

    assert ex.check_cross_attention(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    (dict(queries="memory", keys_values="x", mask="none"), r"queries come from the memory and the keys"),
    (dict(keys_values="x"), r"keys and values come from x, the decoder"),
    (dict(keys_values="x", mask="none"), r"keys and values come from x, the decoder"),
    (dict(mask="causal"), r"applied a causal mask: cross-attention has none"),
    (dict(mask="none"), r"ignored memory_mask"),
    (dict(mask="queries"), r"padding mask hides \*queries\*"),
    (dict(mask="inverted"), r"mask is the wrong way round"),
    (dict(mask="after"), r"zeroed the padded weights after the softmax"),
    (dict(mask="zero"), r"filled the padded scores with 0 instead of -inf"),
    (dict(scale="d_model"), r"scaled the scores by sqrt\(d_model\)"),
    (dict(scale="none"), r"did not scale the scores"),
    (dict(scale="d_head_plain"), r"divided the scores by d_head"),
    (dict(softmax_dim=-2), r"softmax runs over the queries"),
    (dict(w_o=False), r"left out W_O"),
    (dict(split=False), r"did not split into heads"),
])
def test_cross_attention_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_cross_attention(lambda a, x, m, mm: cross_attention(a, x, m, mm, **mistake))


def test_cross_attention_shapes_name_the_mistake():
    """Where T != S, queries from the memory give one row per source position, and a key mask of S
    entries cannot meet the decoder's T keys."""
    def only_t_eq_s(a, x, m, mm):  # right while T == S, then queries from the memory
        return cross_attention(a, x, m, mm, **({} if x.shape[1] == m.shape[1] else dict(queries="memory")))

    with pytest.raises(ExerciseFailed, match=r"T = 3 target positions, S = 6.*returned \(2, 6, 12\).*one row "
                       r"per \*source\* position"):
        ex.check_cross_attention(only_t_eq_s)

    def kv_from_x_masked(a, x, m, mm):
        return cross_attention(a, x, m, mm, **({} if x.shape[1] == m.shape[1] else dict(keys_values="x")))

    with pytest.raises(ExerciseFailed, match=r"raised RuntimeError(.|\n)*T = 3 target positions and S = 6"):
        ex.check_cross_attention(kv_from_x_masked)


def test_cross_attention_other_wrong_answers():
    with pytest.raises(ExerciseFailed, match=r"gives the wrong values \(largest difference"):
        ex.check_cross_attention(lambda a, x, m, mm: cross_attention(a, x, m, mm) + 0.01)
    with pytest.raises(ExerciseFailed, match=r"should return a torch.Tensor"):
        ex.check_cross_attention(lambda a, x, m, mm: cross_attention(a, x, m, mm).tolist())


def test_cross_attention_hints_are_specific():
    """In the T == S case every recomputed mistake differs from the right output and from the others'."""
    attn, x, memory, memory_mask = ex.cross_attention_parts(0)
    with torch.no_grad():
        right = attn(x, memory, mask=tl.padding_mask(memory_mask))
        firsts = {}
        for hint, wrong in ex.cross_attention_mistakes(attn, x, memory, memory_mask):
            assert not torch.allclose(wrong, right, atol=1e-3, equal_nan=True), hint[:60]
            firsts.setdefault(hint, wrong)
    values = list(firsts.items())
    assert len(values) == 14
    for i, (hint_a, a) in enumerate(values):
        for hint_b, b in values[i + 1:]:
            assert not torch.allclose(a, b, atol=1e-3, equal_nan=True), (hint_a[:40], hint_b[:40])


def test_cross_attention_leaves_the_readers_state_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    ex.check_cross_attention(cross_attention)
    assert torch.equal(torch.get_rng_state(), before)


# ---------------------------------------------------------------- (d) the decoder's mask, written independently


def decoder_mask(m, *, combine="and", triangle="lower", diagonal=0, padding="keys", inverted=False,
                 shape="4d", dtype=torch.bool):
    """A reader's decoder mask from plain loops' worth of broadcasting, right by default, each mistake a switch."""
    batch, T = m.shape
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    causal = {"lower": j <= i + diagonal, "upper": j >= i, "above": j > i, "none": torch.ones(T, T, dtype=torch.bool)
              }[triangle]  # (T, T)
    real = m.bool()
    pad = {"keys": real[:, None, :], "queries": real[:, :, None], "both": real[:, None, :] & real[:, :, None],
           "none": torch.ones(batch, 1, 1, dtype=torch.bool)}[padding]  # (batch, T or 1, T or 1)
    out = causal[None] | pad if combine == "or" else causal[None] & pad  # (batch, T, T)
    if inverted:
        out = ~out
    if shape == "4d":
        out = out[:, None]
    elif shape == "heads":
        out = out[:, None].expand(batch, 4, T, T)
    if dtype is float:
        return torch.zeros(out.shape).masked_fill(~out, float("-inf"))
    return out.to(dtype)


def test_decoder_mask_right_answer_passes(capsys):
    assert ex.check_decoder_mask(decoder_mask).passed is True
    assert "Correct" in capsys.readouterr().out


def test_decoder_mask_library_answer_passes():
    assert ex.check_decoder_mask(
        lambda m: tl.combine_masks(tl.causal_mask(m.shape[1]), tl.padding_mask(m))).passed is True


def test_decoder_mask_stub_is_pending(capsys):
    def stub(tgt_attention_mask):
        raise NotImplementedError

    assert ex.check_decoder_mask(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    (dict(combine="or"), r"combined the two masks with OR"),
    (dict(triangle="upper"), r"triangle is transposed \(triu\)"),
    (dict(triangle="above"), r"triangle \*above\* the diagonal"),
    (dict(diagonal=-1), r"leaves out the diagonal"),
    (dict(padding="queries"), r"padding mask hides \*queries\*"),
    (dict(padding="both"), r"as queries \*and\* as keys"),
    (dict(padding="none"), r"only the causal one"),
    (dict(triangle="none"), r"hides only the padding"),
    (dict(inverted=True), r"mask is inverted: True means \*may attend\*"),
    (dict(shape="3d"), r"\(batch, T, T\) mask lines its batch axis up with the heads"),
    (dict(shape="heads"), r"does not broadcast to \(batch, n_heads, T, T\)"),
    (dict(dtype=torch.long), r"the values are right, return it as bool"),
    (dict(dtype=float), r"returned an additive mask \(0 and -inf"),
])
def test_decoder_mask_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_decoder_mask(lambda m: decoder_mask(m, **mistake))


def test_decoder_mask_other_wrong_answers():
    def one_flipped(m):
        out = decoder_mask(m).clone()
        out[0, 0, 4, 1] = ~out[0, 0, 4, 1]
        return out

    with pytest.raises(ExerciseFailed, match=r"row 0, query 4, key 1 is False, expected True"):
        ex.check_decoder_mask(one_flipped)
    with pytest.raises(ExerciseFailed, match=r"returned shape \(3, 5\), which does not broadcast.*padding mask "
                       r"alone"):
        ex.check_decoder_mask(lambda m: m.bool())
    with pytest.raises(ExerciseFailed, match=r"should return a torch.Tensor"):
        ex.check_decoder_mask(lambda m: decoder_mask(m).tolist())


def test_decoder_mask_hints_are_specific():
    for rows in ex.DECODER_MASKS:
        m = torch.tensor(rows)
        right = tl.combine_masks(tl.padding_mask(m), tl.causal_mask(m.shape[1]))
        values = [w for _, w in ex.decoder_mask_mistakes(m)]
        for i, a in enumerate(values):
            assert not torch.equal(a, right)
            assert all(not torch.equal(a, b) for b in values[i + 1:])


# ---------------------------------------------------------------- (e) one beam-search step, written independently


def beam_step(beam_scores, log_probs, n_generated, eos_id, alpha, *, add_beam=True, use_probs=False,
              one_child=False, eos_runs=False, index="right", scored="total", length_extra=1, penalty="hf",
              finish="best k", finished_order="best first"):
    """A reader's beam step with Python loops over the candidates, right by default, each mistake a switch."""
    k, vocab = log_probs.shape
    cands = []
    for b in range(k):
        for v in range(vocab):
            step = math.exp(log_probs[b, v]) if use_probs else float(log_probs[b, v])
            cands.append((step + float(beam_scores[b]) if add_beam else step, b * vocab + v))
    cands.sort(reverse=True)

    def decode(flat):
        return (flat % k, flat // k) if index == "swapped" else divmod(flat, vocab)

    length = n_generated + length_extra
    pen = {"hf": length ** alpha, "gnmt": ((5 + length) / 6) ** alpha, "none": 1.0, "length": length}[penalty]
    finished, running = [], []
    for rank, (score, flat) in enumerate(cands):
        b, v = decode(flat)
        if v == eos_id and (finish == "all" or (finish == "best k" and rank < k)):
            finished.append((b, score / pen))
    if one_child:
        for b in range(k):
            score, v = max((s, flat % vocab) for s, flat in cands if flat // vocab == b and flat % vocab != eos_id)
            running.append((score, b, v))
        running.sort(reverse=True)
    else:
        for score, flat in cands:
            b, v = decode(flat)
            if (v != eos_id or eos_runs) and len(running) < k:
                running.append((score, b, v))
    scores = [{"total": s, "penalised": s / pen, "prob": math.exp(s), "token": float(log_probs[b, v])}[scored]
              for s, b, v in running]
    if finished_order == "worst first":
        finished = finished[::-1]
    return (torch.tensor([b for _, b, _ in running]), torch.tensor([v for _, _, v in running]),
            torch.tensor(scores), finished)


def test_beam_step_right_answer_passes(capsys):
    assert ex.check_beam_step(beam_step).passed is True
    assert "Correct" in capsys.readouterr().out


def test_beam_step_vectorised_answer_passes():
    def vectorised(beam_scores, log_probs, n_generated, eos_id, alpha):
        k, vocab = log_probs.shape
        total, flat = (beam_scores[:, None] + log_probs).flatten().topk(2 * k)
        beams, tokens = flat // vocab, flat % vocab
        ends = tokens == eos_id
        finished = [(int(b), float(s) / (n_generated + 1) ** alpha)
                    for b, s, e in zip(beams[:k], total[:k], ends[:k]) if e]
        return beams[~ends][:k], tokens[~ends][:k], total[~ends][:k], finished

    assert ex.check_beam_step(vectorised).passed is True


def test_beam_step_stub_is_pending(capsys):
    def stub(beam_scores, log_probs, n_generated, eos_id, alpha):
        raise NotImplementedError

    assert ex.check_beam_step(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    (dict(add_beam=False), r"forgot the beams' scores"),
    (dict(use_probs=True), r"added probabilities \(log_probs.exp\(\)\)"),
    (dict(one_child=True), r"Every beam kept one child"),
    (dict(eos_runs=True), r"ends with EOS is still among your running beams"),
    (dict(index="swapped"), r"decoded the flat index with the number of beams"),
    (dict(scored="penalised"), r"divided their scores by the length penalty"),
    (dict(scored="prob"), r"their scores are probabilities"),
    (dict(scored="token"), r"only the new token's log-probability"),
    (dict(penalty="none"), r"finished hypotheses are not penalised"),
    (dict(length_extra=0), r"length leaves out the EOS token"),
    (dict(length_extra=2), r"length counts BOS too"),
    (dict(penalty="gnmt"), r"GNMT's penalty \(\(5 \+ length\) / 6\) \*\* alpha"),
    (dict(penalty="length"), r"divided by the length, not by length \*\* alpha"),
    (dict(finish="all"), r"finished every EOS candidate"),
    (dict(finish="never"), r"returned no finished hypothesis"),
])
def test_beam_step_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_beam_step(lambda *args: beam_step(*args, **mistake))


def test_beam_step_other_wrong_answers():
    with pytest.raises(ExerciseFailed, match=r"shape \(3,\), one per running beam.*\(9,\).*That is k x k"):
        ex.check_beam_step(lambda s, lp, n, e, a: tuple(t.repeat(3) if i < 3 else t
                                                        for i, t in enumerate(beam_step(s, lp, n, e, a))))
    with pytest.raises(ExerciseFailed, match=r"integer ids"):
        ex.check_beam_step(lambda *args: (lambda b, t, s, f: (b.float(), t, s, f))(*beam_step(*args)))
    with pytest.raises(ExerciseFailed, match=r"list of \(beam, score\) pairs"):
        ex.check_beam_step(lambda *args: beam_step(*args)[:3] + (0.5,))
    with pytest.raises(ExerciseFailed, match=r"chooses other running beams(.|\n)*Expected \(beam, token, score\)"):
        ex.check_beam_step(lambda *args: (lambda b, t, s, f: (b.flip(0), t.flip(0), s.flip(0), f))(*beam_step(*args)))


def test_beam_step_hints_are_specific():
    for case in range(len(ex.BEAM_CASES)):
        bs, lp, n, alpha = ex.beam_step_inputs(case)
        args = (bs, lp, n, ex.BEAM_EOS, alpha)
        right = ex.beam_step_reference(*args)
        running = [right] + [ex._beam_variant(*args, **kw) for kw in ex._running_mistakes().values()]
        for i, a in enumerate(running):
            for b in running[i + 1:]:
                assert not (torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and torch.allclose(a[2], b[2]))
        finished = [right[3]] + [[] if kw.get("finished_from") == "none" else ex._beam_variant(*args, **kw)[3]
                                 for kw in ex._finished_mistakes(n, alpha).values()]
        for i, a in enumerate(finished):
            assert right[3], "every case has a finished hypothesis"
            assert all(not ex._same_finished(a, b) for b in finished[i + 1:])


def test_beam_step_reference_is_the_librarys_step():
    """The check's right answer is what tl.beam_search does: drive the library through the same step with a
    table of log-probabilities and read the running beams it extends next (the ids it asks logits for) and
    the finished hypothesis it returns."""
    for case in range(len(ex.BEAM_CASES)):
        beam_scores, log_probs, n, alpha = ex.beam_step_inputs(case)
        k, vocab, eos = ex.BEAM_K, ex.BEAM_VOCAB, ex.BEAM_EOS
        bos = vocab  # an extra id that only the prompt uses
        # step 1 from BOS: tokens 3, 4, 5 with log-probabilities that give the case's beam scores (sorted)
        first = torch.full((vocab + 1,), -30.0)
        first[[3, 4, 5]] = beam_scores
        first[eos] = -20.0  # never among the best
        seen = []

        def next_logits(ids):
            seen.append(ids.clone())
            step = ids.shape[1]
            if step == 1:
                return first.expand(ids.shape[0], -1)
            if step == 2:  # the exercised step: beam b is the one whose first token is 3 + b
                out = torch.full((ids.shape[0], vocab + 1), -30.0)
                out[:, :vocab] = log_probs[ids[:, 1] - 3]
                return out
            return torch.full((ids.shape[0], vocab + 1), -30.0).index_fill(1, torch.tensor([eos]), 0.0)

        # n_generated = 1 for the library here; the penalty's length is checked with its own alpha below
        out = tl.beam_search(next_logits, torch.tensor([[bos]]), 3, k, vocab_size=vocab + 1, length_penalty=alpha,
                             eos_token_id=eos)
        beams, tokens, scores, finished = ex.beam_step_reference(beam_scores, log_probs, 1, eos, alpha)
        extended = seen[2]  # (k, 3): BOS, the parent's token, the step's token
        assert torch.equal(extended[:, 1] - 3, beams) and torch.equal(extended[:, 2], tokens)
        # the finished hypothesis of the step (length 2) against the best running beam ended next step (length 3)
        (b, s), = finished
        assert math.isclose(s, (beam_scores[b] + log_probs[b, eos]).item() / 2 ** alpha, rel_tol=1e-6)
        ended_next = [bos, 3 + int(beams[0]), int(tokens[0]), eos]  # the best running beam, ended at step 3
        winner = [bos, 3 + b, eos] if s > scores[0].item() / 3 ** alpha else ended_next
        assert out[0].tolist()[:len(winner)] == winner
