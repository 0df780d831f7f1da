"""exercises.ch12: right answers pass, stubs are pending, each common mistake gets its own hint. The
all-reduce check starts two processes once here (with a mistake); its diagnosis is tested on its own."""

import math

import pytest
import torch

from transformer_lib import scaling
from transformer_lib.exercises import ch12 as ex
from transformer_lib.exercises._checking import ExerciseFailed


def stub(*args):
    raise NotImplementedError


# -------------------------------------------------------------------- (a) averaging gradients


def test_average_gradients_stub_is_pending_without_starting_processes(capsys):
    assert ex.check_average_gradients(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


def sum_without_dividing(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)  # noqa: F821  (the check's processes import torch.distributed as dist)


def test_average_gradients_runs_in_two_processes_and_names_the_mistake():
    """The whole path: the source goes to two new processes, which run it beside DDP."""
    with pytest.raises(ExerciseFailed, match=r"leaves the sum of the gradients: dist.all_reduce adds them up"):
        ex.check_average_gradients(sum_without_dividing)


def ranks(got_factor=1.0, local_is_got=False, error=None, only_rank_0=False):
    """Two ranks' results as the check's processes report them, the reader's gradients made by a rule."""
    out = []
    for rank in range(2):
        local = {"w": torch.tensor([1.0, 2.0]) * (rank + 1)}
        ddp = {"w": torch.tensor([1.5, 3.0])}  # the mean of the two local gradients
        got = local if local_is_got or (only_rank_0 and rank == 1) else {"w": ddp["w"] * got_factor}
        out.append({"local": local, "got": got, "ddp": ddp, "error": error})
    return out


@pytest.mark.parametrize("results, hint", [
    (ranks(local_is_got=True), r"left each process with its own gradient.*all-reduce of a copy"),
    (ranks(got_factor=2.0), r"leaves the sum of the gradients"),
    (ranks(got_factor=0.5), r"divides by the world size twice"),
    (ranks(only_rank_0=True), r"only rank 0 got the result \(dist.reduce"),
    (ranks(error="ValueError: Cannot use ReduceOp.AVG with Gloo"), r"gloo, the CPU backend, has no ReduceOp.AVG"),
    (ranks(got_factor=3.0), r"neither each process's own nor their mean"),
])
def test_average_gradients_mistakes_are_named(results, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.diagnose_average("average_gradients", results, 2)


def test_average_gradients_right_answer(capsys):
    assert ex.diagnose_average("average_gradients", ranks(), 2).passed is True
    assert "Correct" in capsys.readouterr().out


# -------------------------------------------------------------------------- (b) the ring's bytes


def ring(n_bytes, world_size, *, mistake=None):
    n = world_size
    return {None: 2 * (n - 1) * n_bytes / n, "scatter_only": (n - 1) * n_bytes / n, "whole": 2 * (n - 1) * n_bytes,
            "everyone": (n - 1) * n_bytes, "limit": 2 * n_bytes, "one_chunk": n_bytes / n}[mistake]


def test_ring_bytes_correct(capsys):
    assert ex.check_ring_bytes(ring).passed is True
    assert ex.check_ring_bytes(scaling.ring_bytes_sent).passed is True
    assert "Correct" in capsys.readouterr().out


def test_ring_bytes_stub_is_pending(capsys):
    assert ex.check_ring_bytes(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    ("scatter_only", "reduce-scatter alone"), ("whole", "whole vector at every step"),
    ("everyone", "sent its vector to every other one"), ("limit", "the limit for many workers"),
    ("one_chunk", "one step's chunk only"),
])
def test_ring_bytes_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_ring_bytes(lambda b, n: ring(b, n, mistake=mistake))


def test_ring_hints_are_specific_on_the_first_case():
    case = ex.RING_CASES[0]
    values, right = list(ex.ring_mistakes(*case).values()), scaling.ring_bytes_sent(*case)
    for i, a in enumerate(values):
        assert not math.isclose(a, right, rel_tol=1e-6)
        assert all(not math.isclose(a, b, rel_tol=1e-6) for b in values[i + 1:])


def test_ring_other_errors():
    with pytest.raises(ExerciseFailed, match="gives the wrong number of bytes"):
        ex.check_ring_bytes(lambda b, n: ring(b, n) + 1)
    with pytest.raises(ExerciseFailed, match="should return a number"):
        ex.check_ring_bytes(lambda b, n: "lots")


# ------------------------------------------------------------------------ (c) ZeRO's memory


def zero(n_params, world_size, stage, *, bytes_=(2, 2, 12), shift=0, divide_all=False):
    weights, grads, optimizer = (b * n_params for b in bytes_)
    n, stage = world_size, max(0, min(3, stage + shift))
    if divide_all:
        return (weights + grads + optimizer) / n
    return weights / (n if stage >= 3 else 1) + grads / (n if stage >= 2 else 1) + optimizer / (n if stage >= 1 else 1)


def test_zero_correct(capsys):
    assert ex.check_zero_bytes(zero).passed is True
    out = capsys.readouterr().out
    assert "Correct" in out and "7B LLaMA on 8 GPUs" in out


def test_zero_stub_is_pending(capsys):
    assert ex.check_zero_bytes(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, hint", [
    (dict(bytes_=(4, 4, 8)), "fp32 training"), (dict(bytes_=(2, 2, 8)), "forgot the fp32 master copy"),
    (dict(shift=1), "one kind too many"), (dict(shift=-1), "one kind too few"),
    (dict(divide_all=True), "divided everything by the number of GPUs"),
])
def test_zero_mistakes_are_named(kwargs, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_zero_bytes(lambda p, n, s: zero(p, n, s, **kwargs))
