"""exercises.ch09: each check accepts a right answer, waits for a stub, and names each known mistake."""

import pytest
import torch

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
