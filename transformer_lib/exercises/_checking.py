"""The machinery behind the exercises' check functions.

A check calls the reader's function on inputs chosen so that common mistakes give *different*
answers, compares with the library's result, and when they differ names the mistake
("is your epsilon inside the square root?") by recomputing each known mistake and seeing
which one the reader's answer matches.

* Right answer: prints a line starting with ``Correct`` and returns a true :class:`Verdict`.
* Not written yet (``raise NotImplementedError``): prints what to do and returns a false
  :class:`Verdict`, so that running a chapter top to bottom (the book's build, nbval) never
  fails on an unsolved exercise.
* Wrong answer: raises :class:`ExerciseFailed` (an ``AssertionError``) with the diagnosis.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


class ExerciseFailed(AssertionError):
    """The reader's answer is wrong; the message says how."""


class _NotImplementedYet:
    pass


NOT_IMPLEMENTED = _NotImplementedYet()


def attempt(fn: Callable, *args, **kwargs):
    """Call the reader's function; NOT_IMPLEMENTED if it raises NotImplementedError."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        return NOT_IMPLEMENTED


def call(name: str, fn: Callable, *args, hint: str = ""):
    """:func:`attempt` on copies of the tensor arguments (the reader's code may change them in place);
    an exception in the reader's code becomes an ExerciseFailed naming the arguments it was called with."""
    try:
        return attempt(fn, *(a.clone() if isinstance(a, Tensor) else a for a in args))
    except ExerciseFailed:
        raise
    except Exception as e:  # the reader's bug: report it with the shapes it was called with
        shapes = ", ".join(str(tuple(a.shape)) if isinstance(a, Tensor)
                           else type(a).__name__ if isinstance(a, torch.nn.Module) else repr(a) for a in args)
        if "view size is not compatible" in str(e):
            hint = ("A slice such as logits[:, :-1] is not contiguous in memory, so .view() cannot flatten it: "
                    "use .reshape(), which copies when it has to.")
        raise ExerciseFailed(f"{name} raised {type(e).__name__}: {e}\n(called with arguments {shapes}). {hint}".rstrip()) from e


class Verdict:
    """A check's result: true when the answer is right (``assert check(...)`` works).

    It displays nothing, so a check on the last line of a cell shows only its message,
    not a stray ``True`` or ``False`` under it.
    """

    def __init__(self, passed: bool):
        self.passed = passed

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return f"Verdict(passed={self.passed})"

    def _ipython_display_(self) -> None:
        pass  # the check has printed its message


def pending(name: str) -> Verdict:
    print(f"Not implemented yet: write {name} above (replace its raise NotImplementedError), "
          "then run this cell again.")
    return Verdict(False)


def correct(message: str) -> Verdict:
    print(f"Correct! {message}")
    return Verdict(True)


def fail(message: str):
    raise ExerciseFailed(message)


def expect_tensor(name: str, got, shape: tuple[int, ...] | torch.Size) -> Tensor:
    """The answer must be a tensor of the given shape."""
    if not isinstance(got, Tensor):
        fail(f"{name} should return a torch.Tensor, but it returned {type(got).__name__}.")
    if tuple(got.shape) != tuple(shape):
        fail(f"{name} should return shape {tuple(shape)}, but it returned {tuple(got.shape)}.")
    return got


def close(a: Tensor, b: Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    return a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=atol, rtol=rtol)


def diagnose(name: str, got: Tensor, expected: Tensor, mistakes: dict[str, Tensor], atol: float = 1e-5) -> None:
    """Fail with the hint of the first known mistake that ``got`` matches, or with the size of the error."""
    for hint, wrong in mistakes.items():
        if close(got, wrong, atol=atol):
            fail(f"{name} is not right yet. {hint}")
    err = (got.float() - expected.float()).abs().max().item()
    fail(f"{name} gives the wrong values (largest difference from the right answer: {err:.3g}). "
         f"Check the formula step by step against the text.")


def check_against(
    name: str,
    got,
    expected: Tensor,
    mistakes: dict[str, Tensor] | None = None,
    success: str = "",
    atol: float = 1e-5,
) -> bool:
    """The whole check: pending / shape / values / diagnosis / success."""
    if got is NOT_IMPLEMENTED:
        return pending(name)
    expect_tensor(name, got, expected.shape)
    if not close(got, expected, atol=atol):
        diagnose(name, got, expected, mistakes or {}, atol=atol)
    return correct(success)
