"""exercises.ch05: each check accepts a right answer, waits for a stub, and names each known mistake."""

import math

import pytest
import torch

from transformer_lib.exercises import ch05 as ex
from transformer_lib.exercises._checking import ExerciseFailed

# ---------------------------------------------------------------- (a) sinusoidal, written independently


def sinusoidal_loops(n_positions, d_model, *, swap=False, two_i=True, per_dimension=False, start=0, halves=False,
                     base=10000):
    """Plain Python loops, with switches for the mistakes the check should name."""
    table = torch.zeros(n_positions, d_model)
    for p in range(n_positions):
        pos = p + start
        for i in range(d_model // 2):
            sin_exp = (2 * i if two_i else i) / d_model
            cos_exp = (2 * i + 1) / d_model if per_dimension else sin_exp
            s, c = math.sin(pos / base**sin_exp), math.cos(pos / base**cos_exp)
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


def sinusoidal_doubled_two(n_positions, d_model):
    """The slip of issue (a): i taken from arange(0, d, 2) (already 2i) and then multiplied by 2 again."""
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
    i = torch.arange(0, d_model, 2, dtype=torch.float32)
    angle = pos / 10000 ** (2 * i / d_model)  # exponent 4i/d_model
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe


def test_sinusoidal_doubled_two_is_named():
    with pytest.raises(ExerciseFailed, match=r"counted the 2 twice: your exponent is 4i/d_model") as err:
        ex.check_sinusoidal(sinusoidal_doubled_two)
    assert "arange(0, d_model, 2)" in str(err.value)  # the fix: it already is 2i


@pytest.mark.parametrize(
    "base, shown", [(1000, "1000"), (500, "500"), (1e6, "1e6"), (2.5e4, "25000"), (123.4, "123.4")]
)
def test_sinusoidal_wrong_base_is_named(base, shown):
    with pytest.raises(ExerciseFailed, match=rf"uses base {shown} instead of 10000") as err:
        ex.check_sinusoidal(lambda n, d: sinusoidal_loops(n, d, base=base))
    assert "Everything else" in str(err.value)


def test_sinusoidal_base_100_is_the_missing_two():
    """Base 100 gives exactly the table with i for 2i: the message names both readings."""
    with pytest.raises(ExerciseFailed, match=r"should be 2i/d_model.*base 100 = sqrt\(10000\)"):
        ex.check_sinusoidal(lambda n, d: sinusoidal_loops(n, d, base=100))


def test_sinusoidal_wrong_base_with_another_mistake_is_not_called_a_base():
    """Only a table that is right up to the base is diagnosed as a wrong base."""
    with pytest.raises(ExerciseFailed, match="largest difference"):
        ex.check_sinusoidal(lambda n, d: sinusoidal_loops(n, d, base=1000, start=1))


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
                 start=0, ignore_offset=False, rotate=True, base=10000):
    """Each feature pair read as a complex number and multiplied by e^{i m theta}; switches for the mistakes."""
    seq, d = x.shape
    offset = 0 if ignore_offset else positions_offset
    theta = torch.tensor([base ** exponent(i, d) for i in range(d // 2)], dtype=torch.float64)
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
        (dict(exponent=lambda i, d: -4 * i / d), r"counted the 2 twice: your theta_i = 10000\^\(-4i/head_dim\)"),
        (dict(base=100), r"the 2 is missing.*base 100 = sqrt\(10000\)"),
        (dict(start=1), "positions start at 1"),
        (dict(ignore_offset=True), "ignored positions_offset"),
    ],
)
def test_apply_rope_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_apply_rope(lambda x, positions_offset=0: rope_complex(x, positions_offset, **mistake))


@pytest.mark.parametrize("base, shown", [(1000, "1000"), (500, "500"), (1e6, "1e6")])
def test_apply_rope_wrong_base_is_named(base, shown):
    with pytest.raises(ExerciseFailed, match=rf"theta_i uses base {shown} instead of 10000"):
        ex.check_apply_rope(lambda x, positions_offset=0: rope_complex(x, positions_offset, base=base))


def rope_in_place(x, positions_offset=0, *, odd_first=False):
    """The slip of issue (c): x's even features overwritten before the odd ones are computed from them."""
    seq, head_dim = x.shape
    theta = 10000 ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    m = torch.arange(positions_offset, positions_offset + seq, dtype=torch.float32)[:, None]
    cos, sin = torch.cos(m * theta), torch.sin(m * theta)
    a, b = x[:, 0::2], x[:, 1::2]  # views: they change when x does
    if odd_first:
        x[:, 1::2] = a * sin + b * cos
        x[:, 0::2] = a * cos - b * sin  # b is already rotated
    else:
        x[:, 0::2] = a * cos - b * sin
        x[:, 1::2] = a * sin + b * cos  # a is already rotated
    return x


def test_apply_rope_in_place_overwrite_is_named():
    with pytest.raises(ExerciseFailed, match=r"overwrote the even features x\[\.\.\., 0::2\] in place") as err:
        ex.check_apply_rope(rope_in_place)
    message = str(err.value)
    assert "a' sin t + b cos t instead of a sin t + b cos t" in message
    assert "torch.empty_like(x)" in message  # the fix


def test_apply_rope_in_place_overwrite_odd_first_is_named():
    with pytest.raises(ExerciseFailed, match=r"overwrote the odd features x\[\.\.\., 1::2\] in place"):
        ex.check_apply_rope(lambda x, positions_offset=0: rope_in_place(x, positions_offset, odd_first=True))


def test_apply_rope_in_place_on_a_copy_passes():
    """Writing into x is fine once both coordinates are read first."""

    def in_place_but_right(x, positions_offset=0):
        seq, head_dim = x.shape
        theta = 10000 ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        m = torch.arange(positions_offset, positions_offset + seq, dtype=torch.float32)[:, None]
        cos, sin = torch.cos(m * theta), torch.sin(m * theta)
        a, b = x[:, 0::2].clone(), x[:, 1::2].clone()
        x[:, 0::2], x[:, 1::2] = a * cos - b * sin, a * sin + b * cos
        return x

    assert ex.check_apply_rope(in_place_but_right).passed is True


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


# ---------------------------------------------------------------- off-by-one exponents (not a wrong base)


def sinusoidal_off_by_one(n_positions, d_model, k=1):
    """The exponent divided by d_model - k: k = 1 a slip, k = 2 from torch.linspace(0, 1, d_model // 2)."""
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
    exponent = (torch.linspace(0, 1, d_model // 2) if k == 2
                else torch.arange(0, d_model, 2, dtype=torch.float32) / (d_model - 1))
    angle = pos / 10000**exponent
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe


@pytest.mark.parametrize("k", [1, 2])
def test_sinusoidal_off_by_one_exponent_is_named_not_a_base(k):
    """2i/(d - 1) is exactly the table of base 10000^(d/(d-1)) = 37275 at d = 8: the check used to
    call it 'base 37280'."""
    with pytest.raises(ExerciseFailed, match=rf"divides 2i by d_model - {k} instead of d_model") as err:
        ex.check_sinusoidal(lambda n, d: sinusoidal_off_by_one(n, d, k))
    assert "uses base" not in str(err.value)


@pytest.mark.parametrize("k", [1, 2])
def test_apply_rope_off_by_one_exponent_is_named_not_a_base(k):
    def rope_off_by_one(x, positions_offset=0):
        return rope_complex(x, positions_offset, exponent=lambda i, d: -2 * i / (d - k))

    with pytest.raises(ExerciseFailed, match=rf"divides 2i by head_dim - {k} instead of head_dim") as err:
        ex.check_apply_rope(rope_off_by_one)
    assert "uses base" not in str(err.value)
