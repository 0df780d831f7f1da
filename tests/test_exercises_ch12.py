"""exercises.ch12: right answers pass, stubs are pending, each common mistake gets its own hint. The
all-reduce check starts its three processes once here (with a mistake); its diagnosis is tested on its own."""

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


def divided_by_two(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)  # noqa: F821  (the check's processes import torch.distributed as dist)
        p.grad /= 2              # right for two processes only


@pytest.mark.slow  # launches three processes
def test_average_gradients_runs_in_three_processes_and_names_a_fixed_divisor():
    """The whole path: the source goes to new processes, which run it beside DDP. With three of them a
    division by 2 written into the function is caught (the check used to run two, and passed it)."""
    with pytest.raises(ExerciseFailed, match=r"divides the sum by 2, but the check runs 3 processes"):
        ex.check_average_gradients(divided_by_two)


def ranks(got_factor=1.0, local_is_got=False, error=None, only_rank_0=False, calls=("grad",), world=2):
    """The ranks' results as the check's processes report them, the reader's gradients made by a rule."""
    out = []
    local_grads = [torch.tensor([1.0, 2.0]) * (rank + 1) for rank in range(world)]
    mean = sum(local_grads) / world
    for rank in range(world):
        local = {"w": local_grads[rank]}
        ddp = {"w": mean}  # the mean of the local gradients
        got = local if local_is_got or (only_rank_0 and rank > 0) else {"w": ddp["w"] * got_factor}
        out.append({"local": local, "got": got, "ddp": ddp, "error": error, "calls": list(calls)})
    return out


@pytest.mark.parametrize("results, hint", [
    (ranks(local_is_got=True, calls=()), r"left each process with its own gradient"),
    (ranks(local_is_got=True, calls=("copy",)), r"all-reduced a copy of each gradient"),
    (ranks(local_is_got=True, calls=("weight", "weight")), r"all-reduced the weights \(p or p.data\), not the "
                                                          r"gradients"),
    (ranks(got_factor=2.0), r"leaves the sum of the gradients"),
    (ranks(got_factor=0.5), r"divides by the world size twice"),
    (ranks(only_rank_0=True), r"only rank 0 got the result \(dist.reduce"),
    (ranks(error="ValueError: Cannot use ReduceOp.AVG with Gloo"), r"gloo, the CPU backend, has no ReduceOp.AVG"),
    (ranks(got_factor=3.0), r"neither each process's own nor their mean"),
    (ranks(got_factor=3.0, calls=("grad async",)), r"async_op=True.*\.wait\(\)"),
])
def test_average_gradients_mistakes_are_named(results, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.diagnose_average("average_gradients", results, 2)


@pytest.mark.parametrize("results, hint", [
    # p.grad /= 2 on three processes: 3/2 of the mean
    (ranks(got_factor=1.5, world=3), r"divides the sum by 2, but the check runs 3 processes.*get_world_size"),
    # a name from the notebook (NPROC) raises NameError inside the check's processes
    (ranks(error="NameError: name 'NPROC' is not defined", world=3),
     r"NPROC.*runs it in 3 new processes.*nothing else from the notebook.*dist.get_world_size"),
    (ranks(got_factor=3.0, world=3), r"leaves the sum of the gradients"),
    (ranks(only_rank_0=True, world=3), r"only rank 0 got the result"),
])
def test_average_gradients_mistakes_with_three_processes(results, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.diagnose_average("average_gradients", results, 3)


def test_average_gradients_right_answer(capsys):
    assert ex.diagnose_average("average_gradients", ranks(), 2).passed is True
    assert ex.diagnose_average("average_gradients", ranks(world=3), 3).passed is True
    assert "Correct" in capsys.readouterr().out


def test_average_gradients_checks_with_three_processes_by_default():
    import inspect

    assert inspect.signature(ex.check_average_gradients).parameters["world_size"].default == 3


# -------------------------------------------------------------------------- (b) the ring's bytes


def ring(n_bytes, world_size, *, mistake=None):
    n = world_size
    return {None: 2 * (n - 1) * n_bytes / n, "scatter_only": (n - 1) * n_bytes / n, "whole": 2 * (n - 1) * n_bytes,
            "everyone": (n - 1) * n_bytes, "limit": 2 * n_bytes, "one_chunk": n_bytes / n,
            "sends_and_receives": 4 * (n - 1) * n_bytes / n, "factor": 2 * (n - 1) / n,
            "bits": 16 * (n - 1) * n_bytes / n}[mistake]


def test_ring_bytes_correct(capsys):
    assert ex.check_ring_bytes(ring).passed is True
    assert ex.check_ring_bytes(scaling.ring_bytes_sent).passed is True
    assert "Correct" in capsys.readouterr().out


@pytest.mark.parametrize("whole_bytes", [lambda b, n: 2 * (n - 1) * b // n, lambda b, n: round(2 * (n - 1) * b / n),
                                         lambda b, n: int(2 * (n - 1) * b / n)], ids=["floor", "round", "int"])
def test_ring_bytes_in_whole_bytes_are_right(whole_bytes, capsys):
    """The old check refused these with "expected 1.5e+06, got 1.5e+06"."""
    assert ex.check_ring_bytes(whole_bytes).passed is True


def test_ring_bytes_stub_is_pending(capsys):
    assert ex.check_ring_bytes(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    ("scatter_only", "reduce-scatter alone"), ("whole", "whole vector at every step"),
    ("everyone", "sent its vector to every other one"), ("limit", "the limit for many workers"),
    ("one_chunk", "one step's chunk only"), ("sends_and_receives", "what each worker sends and what it receives"),
    ("factor", "the factor 2 \\(N - 1\\) / N alone"), ("bits", "in bits"),
])
def test_ring_bytes_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_ring_bytes(lambda b, n: ring(b, n, mistake=mistake))


def test_ring_hints_are_specific_on_the_first_case():
    """The first case alone tells every mistake apart (N = 4 did not: sends + receives, 4 (N - 1) / N, is
    (N - 1) x there)."""
    case = ex.RING_CASES[0]
    values, right = list(ex.ring_mistakes(*case).values()), scaling.ring_bytes_sent(*case)
    for i, a in enumerate(values):
        assert not math.isclose(a, right, rel_tol=1e-6)
        assert all(not math.isclose(a, b, rel_tol=1e-6) for b in values[i + 1:])


def test_ring_other_errors():
    with pytest.raises(ExerciseFailed, match=r"ring_bytes\(1000003, 5\) gives the wrong number of bytes: "
                                             r"expected 1,600,004.8, got 1,600,009.8"):
        ex.check_ring_bytes(lambda b, n: ring(b, n) + 5)
    with pytest.raises(ExerciseFailed, match="should return a number"):
        ex.check_ring_bytes(lambda b, n: "lots")


# ------------------------------------------------------------------------ (c) ZeRO's memory


def zero(n_params, world_size, stage, *, bytes_=(2, 2, 12), shift=0, divide_all=False, cumulative=True, unit=1):
    weights, grads, optimizer = (b * n_params for b in bytes_)
    n = world_size
    if divide_all:
        return (weights + grads + optimizer) / n
    if not cumulative:  # stage k shards only the kind it adds
        return (weights / (n if stage == 3 else 1) + grads / (n if stage == 2 else 1)
                + optimizer / (n if stage == 1 else 1))
    stage = max(0, min(3, stage + shift))
    return (weights / (n if stage >= 3 else 1) + grads / (n if stage >= 2 else 1)
            + optimizer / (n if stage >= 1 else 1)) / unit


def test_zero_correct(capsys):
    assert ex.check_zero_bytes(zero).passed is True
    out = capsys.readouterr().out
    assert "Correct" in out and "7B LLaMA on 8 GPUs" in out and "more than an 80 GB GPU holds" in out


def test_zero_in_whole_bytes_is_right():
    """The old check refused int(...) with "expected 5.50002e+06, got 5.50002e+06"."""
    assert ex.check_zero_bytes(lambda p, n, s: int(zero(p, n, s))).passed is True
    assert ex.check_zero_bytes(lambda p, n, s: round(zero(p, n, s))).passed is True


def test_zero_stub_is_pending(capsys):
    assert ex.check_zero_bytes(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, hint", [
    (dict(bytes_=(4, 4, 8)), "fp32 training"), (dict(bytes_=(2, 2, 8)), "forgot the fp32 master copy"),
    (dict(bytes_=(6, 2, 8)), "master copy with the weights"), (dict(bytes_=(2, 4, 12)), "fp32 gradients"),
    (dict(cumulative=False), "Stages are cumulative"),
    (dict(shift=1), "one kind too many"), (dict(shift=-1), "one kind too few"),
    (dict(divide_all=True), "divided everything by the number of GPUs"),
    (dict(unit=2**30), "in GiB"), (dict(unit=1e9), "in GB"),
])
def test_zero_mistakes_are_named(kwargs, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_zero_bytes(lambda p, n, s: zero(p, n, s, **kwargs))


def test_zero_mistakes_differ_from_each_other_and_from_the_answer():
    """Over the cases, no two mistakes give the same answers, and none gives the right ones: each is named
    for what it is (one case alone could not: at stage 1, 6 + 2 + 8/N is 4 + 4 + 8/N)."""
    answers = {hint: [ex.zero_mistakes(*case)[hint] for case in ex.ZERO_CASES] for hint in ex.zero_mistakes(1, 1, 0)}
    answers["right"] = [ex.zero_bytes_of(*case) for case in ex.ZERO_CASES]
    names = list(answers)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert any(not math.isclose(x, y, rel_tol=1e-6) for x, y in zip(answers[a], answers[b])), (a, b)


def test_zero_other_errors():
    with pytest.raises(ExerciseFailed, match=r"zero_bytes\(1000003, 4, 1\) gives the wrong bytes: expected "
                                             r"7,000,021, got 7,000,031"):
        ex.check_zero_bytes(lambda p, n, s: zero(p, n, s) + 10)
