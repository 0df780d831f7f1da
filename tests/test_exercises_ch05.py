"""exercises.ch05: each check accepts a right answer, waits for a stub, and names each known mistake."""

import math

import pytest
import torch

from transformer_lib.exercises import ch05 as ex
from transformer_lib.exercises._checking import ExerciseFailed

# ---------------------------------------------------------------- (a) sinusoidal, written independently


def sinusoidal_loops(n_positions, d_model, *, swap=False, two_i=True, per_dimension=False, start=0, halves=False):
    """Plain Python loops, with switches for the mistakes the check should name."""
    table = torch.zeros(n_positions, d_model)
    for p in range(n_positions):
        pos = p + start
        for i in range(d_model // 2):
            sin_exp = (2 * i if two_i else i) / d_model
            cos_exp = (2 * i + 1) / d_model if per_dimension else sin_exp
            s, c = math.sin(pos / 10000**sin_exp), math.cos(pos / 10000**cos_exp)
            if swap:
                s, c = c, s
            if halves:
                table[p, i], table[p, d_model // 2 + i] = s, c
            else:
                table[p, 2 * i], table[p, 2 * i + 1] = s, c
    return table


def test_sinusoidal_right_answer_passes(capsys):
    assert ex.check_sinusoidal(sinusoidal_loops).passed is True
    assert "Correct" in capsys.readouterr().out


def test_sinusoidal_float64_answer_passes():
    assert ex.check_sinusoidal(lambda n, d: sinusoidal_loops(n, d).double()).passed is True


def test_sinusoidal_stub_is_pending(capsys):
    def stub(n_positions, d_model):
        raise NotImplementedError

    assert ex.check_sinusoidal(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(swap=True), "cos on the even dimensions"),
        (dict(two_i=False), "should be 2i/d_model"),
        (dict(per_dimension=True), "every dimension its own frequency"),
        (dict(start=1), "positions start at 1"),
        (dict(halves=True), "first half"),
    ],
)
def test_sinusoidal_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_sinusoidal(lambda n, d: sinusoidal_loops(n, d, **mistake))


def test_sinusoidal_wrong_shape_and_type():
    with pytest.raises(ExerciseFailed, match=r"shape \(16, 8\).*\(8, 16\)"):
        ex.check_sinusoidal(lambda n, d: sinusoidal_loops(n, d).T)
    with pytest.raises(ExerciseFailed, match="torch.Tensor"):
        ex.check_sinusoidal(lambda n, d: sinusoidal_loops(n, d).tolist())


def test_sinusoidal_unknown_error_reports_size():
    with pytest.raises(ExerciseFailed, match="largest difference"):
        ex.check_sinusoidal(lambda n, d: sinusoidal_loops(n, d) * 1.01)


# ---------------------------------------------------------------- (b) apply_rope, written independently


def rope_complex(x, positions_offset=0, *, direction=1, halves=False, exponent=lambda i, d: -2 * i / d,
                 start=0, ignore_offset=False, rotate=True):
    """Each pair read as a complex number and multiplied by e^{i m theta}; switches for the mistakes."""
    seq, d = x.shape
    offset = 0 if ignore_offset else positions_offset
    theta = torch.tensor([10000 ** exponent(i, d) for i in range(d // 2)], dtype=torch.float64)
    m = torch.arange(seq, dtype=torch.float64)[:, None] + offset + start
    turn = torch.polar(torch.ones(seq, d // 2, dtype=torch.float64), direction * m * theta if rotate else 0 * m * theta)
    x = x.double()
    if halves:
        z = torch.complex(x[:, : d // 2], x[:, d // 2 :]) * turn
        return torch.cat([z.real, z.imag], dim=-1).float()
    z = torch.view_as_complex(x.reshape(seq, d // 2, 2).contiguous()) * turn
    return torch.view_as_real(z).flatten(-2).float()


def test_apply_rope_right_answer_passes(capsys):
    assert ex.check_apply_rope(rope_complex).passed is True
    assert "Correct" in capsys.readouterr().out


def test_apply_rope_stub_is_pending(capsys):
    def stub(x, positions_offset=0):
        raise NotImplementedError

    assert ex.check_apply_rope(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(rotate=False), "forgot the position"),
        (dict(direction=-1), "wrong way"),
        (dict(halves=True), "rotate_half"),
        (dict(exponent=lambda i, d: -i / d), "the 2 is missing"),
        (dict(exponent=lambda i, d: 2 * i / d), r"wrong sign in the exponent"),
        (dict(start=1), "positions start at 1"),
        (dict(ignore_offset=True), "ignored positions_offset"),
    ],
)
def test_apply_rope_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_apply_rope(lambda x, positions_offset=0: rope_complex(x, positions_offset, **mistake))


def test_apply_rope_subtracted_offset_is_named():
    with pytest.raises(ExerciseFailed, match="subtracted positions_offset"):
        ex.check_apply_rope(lambda x, positions_offset=0: rope_complex(x, -positions_offset))


def test_apply_rope_wrong_shape():
    with pytest.raises(ExerciseFailed, match=r"shape \(6, 8\)"):
        ex.check_apply_rope(lambda x, positions_offset=0: rope_complex(x, positions_offset)[None])
    with pytest.raises(ExerciseFailed, match=r"shape \(6, 8\)"):  # the offset call is checked too
        ex.check_apply_rope(lambda x, positions_offset=0: rope_complex(x)[: 6 - positions_offset])


def test_apply_rope_unknown_error_reports_size():
    with pytest.raises(ExerciseFailed, match="largest difference"):
        ex.check_apply_rope(lambda x, positions_offset=0: rope_complex(x, positions_offset) + 0.1)
