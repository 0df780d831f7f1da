"""exercises.ch11: right answers pass, stubs are pending, each common mistake gets its own hint."""

import math
import statistics

import pytest
import torch

from transformer_lib import speed
from transformer_lib.exercises import ch11 as ex
from transformer_lib.exercises._checking import ExerciseFailed


def stub(*args):
    raise NotImplementedError


def distinct(values, right):
    """Every mistake gives a number of its own, and none gives the right one."""
    for i, a in enumerate(values):
        assert not math.isclose(a, right, rel_tol=1e-6)
        for b in values[i + 1:]:
            assert not math.isclose(a, b, rel_tol=1e-6)


# ----------------------------------------------------------------------------------- (a) FLOPs


def flops(N, L, H, d_head, T, *, mistake=None):
    """A reader's FLOPs per token, right by default, with each mistake as a switch."""
    return {
        None: 6 * N + 12 * L * H * d_head * T,
        "no_attention": 6 * N,
        "forward_only": 2 * N + 4 * L * H * d_head * T,
        "one_per_madd": 3 * N + 6 * L * H * d_head * T,
        "quadratic": 6 * N + 12 * L * H * d_head * T * T,
        "no_heads": 6 * N + 12 * L * d_head * T,
        "no_layers": 6 * N + 12 * H * d_head * T,
        # the causal count: each query meets about half the keys (exactly (T + 1) / 2 on average)
        "causal_half": 6 * N + 6 * L * H * d_head * T,
        "causal_exact": 6 * N + 12 * L * H * d_head * (T + 1) / 2,
    }[mistake]


def test_flops_correct(capsys):
    assert ex.check_flops_per_token(flops).passed is True
    assert ex.check_flops_per_token(speed.flops_per_token).passed is True
    assert ex.check_flops_per_token(lambda *a: torch.tensor(float(flops(*a)), dtype=torch.float64)).passed is True
    assert "Correct" in capsys.readouterr().out


def test_flops_stub_is_pending(capsys):
    assert ex.check_flops_per_token(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    ("no_attention", r"left out attention's own work"), ("forward_only", r"forward pass only"),
    ("one_per_madd", r"multiply-add as one operation"), ("quadratic", r"grows with seq_len squared"),
    ("no_heads", r"missing the heads"), ("no_layers", r"missing the layers"),
    ("causal_half", r"that is the causal count .* a valid way to count the work\. This exercise asks for PaLM's count"),
    ("causal_exact", r"counted the causal products exactly: .* a valid count; this exercise asks for PaLM's count"),
])
def test_flops_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_flops_per_token(lambda *a: flops(*a, mistake=mistake))


def test_flops_hints_are_specific_on_the_first_case():
    case = ex.FLOPS_CASES[0]
    distinct(list(ex.flops_mistakes(*case).values()), speed.flops_per_token(*case))


def test_flops_causal_count_is_half_the_attention_term():
    """The causal hints describe what a causal kernel computes: query t meets t keys, so the
    attention products cost sum_t 2 x 2 t d_head FLOPs forward per head and layer, x 3 with the
    backward pass, about half of PaLM's full-product count."""
    N, L, H, d_head, T = ex.FLOPS_CASES[0]
    causal = 6 * N + L * H * sum(3 * 2 * 2 * t * d_head for t in range(1, T + 1)) / T
    assert causal == flops(N, L, H, d_head, T, mistake="causal_exact")
    full = speed.flops_per_token(N, L, H, d_head, T)
    assert (causal - 6 * N) / (full - 6 * N) == pytest.approx(0.5, abs=1 / T)


def test_flops_cases_are_the_sizes_the_docstring_names():
    """The second case is the baby size (4 layers, 4 heads, d_model 128, context 64, 65 characters)
    with biases, the third GPT-2 small: N is their parameters in matrix products, as tl.speed counts them."""
    import transformer_lib as tl

    with torch.device("meta"):  # sizes only, no memory
        baby = tl.GPT2(tl.GPT2Config(vocab_size=65, n_ctx=64, d_model=128, n_layers=4, n_heads=4, bias=True))
        small = tl.GPT2(tl.GPT2Config(vocab_size=50257, n_ctx=1024, d_model=768, n_layers=12, n_heads=12,
                                      bias=True))
    assert ex.FLOPS_CASES[1] == (speed.matmul_parameters(baby), 4, 4, 32, 64)
    assert ex.FLOPS_CASES[2] == (speed.matmul_parameters(small), 12, 12, 64, 1024)


def test_flops_correct_message_names_palms_count(capsys):
    assert ex.check_flops_per_token(flops).passed is True
    out = capsys.readouterr().out
    assert "PaLM's count" in out and "counted causally" in out


def test_flops_other_errors():
    with pytest.raises(ExerciseFailed, match=r"gives the wrong FLOPs: expected"):
        ex.check_flops_per_token(lambda *a: flops(*a) + 1)
    with pytest.raises(ExerciseFailed, match=r"should return a number, but it returned str"):
        ex.check_flops_per_token(lambda *a: "many")
    with pytest.raises(ExerciseFailed, match=r"raised ZeroDivisionError"):
        ex.check_flops_per_token(lambda *a: 1 / 0)


# ----------------------------------------------------------------------------- (b) tokens/s


def throughput(steps, batch, seq_len, *, mistake=None):
    tokens = batch * seq_len
    ordered = sorted(steps)
    return {
        None: tokens / statistics.median(steps),
        "mean": tokens / (sum(steps) / len(steps)),
        "min": tokens / min(steps),
        "middle": tokens / ordered[len(ordered) // 2],
        "first": tokens / steps[0],
        "sequences": batch / statistics.median(steps),
        "positions": seq_len / statistics.median(steps),
        "inverted": statistics.median(steps) / tokens,
    }[mistake]


def test_tokens_per_second_correct(capsys):
    assert ex.check_tokens_per_second(throughput).passed is True
    assert ex.check_tokens_per_second(lambda s, b, t: b * t / speed.median(s)).passed is True
    assert "Correct" in capsys.readouterr().out


def test_tokens_per_second_stub_is_pending(capsys):
    assert ex.check_tokens_per_second(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    ("mean", r"You used the mean"), ("min", r"You used the fastest step"), ("middle", r"middle element"),
    ("first", r"first timed step"), ("sequences", r"counted sequences"), ("positions", r"forgot the batch"),
    ("inverted", r"seconds per token"),
])
def test_tokens_per_second_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_tokens_per_second(lambda s, b, t: throughput(s, b, t, mistake=mistake))


def test_tokens_per_second_hints_are_specific():
    for steps, batch, seq_len in ex.STEP_CASES:
        distinct(list(ex.tokens_per_second_mistakes(list(steps), batch, seq_len).values()),
                 batch * seq_len / statistics.median(steps))


def test_tokens_per_second_does_not_see_a_sorted_list_afterwards():
    def sorts_in_place(steps, batch, seq_len):
        steps.sort()  # a reader's side effect must not change the next call's data
        return batch * seq_len / statistics.median(steps)

    before = [list(steps) for steps, _, _ in ex.STEP_CASES]
    assert ex.check_tokens_per_second(sorts_in_place).passed is True
    assert [list(steps) for steps, _, _ in ex.STEP_CASES] == before and before[0] != sorted(before[0])


# --------------------------------------------------------------------------- (c) KV cache size


def kv_bytes(L, B, T, d, nbytes, *, mistake=None):
    per = B * T * d * nbytes
    return {
        None: 2 * L * per, "keys_only": L * per, "no_layers": 2 * per, "no_batch": 2 * L * T * d * nbytes,
        "values": 2 * L * B * T * d, "bits": 2 * L * per * 8, "weights": 2 * L * d * d * nbytes,
    }[mistake]


def test_kv_cache_bytes_correct(capsys):
    assert ex.check_kv_cache_bytes(kv_bytes).passed is True
    assert "Correct" in capsys.readouterr().out


def test_kv_cache_bytes_matches_a_real_cache():
    """The formula is what a library KVCache holds after a forward pass."""
    import transformer_lib as tl

    model = tl.GPT2(tl.GPT2Config(vocab_size=50, n_ctx=32, d_model=32, n_layers=3, n_heads=4)).eval()
    cache = model.new_kv_cache()
    with torch.no_grad():
        model(torch.zeros(2, 20, dtype=torch.long), kv_cache=cache)
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.k, layer.v))
    assert held == kv_bytes(3, 2, 20, 32, 4)


def test_kv_cache_bytes_stub_is_pending(capsys):
    assert ex.check_kv_cache_bytes(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    ("keys_only", r"keys only"), ("no_layers", r"left out the layers"), ("no_batch", r"left out the batch"),
    ("values", r"counted values, not bytes"), ("bits", r"counted bits"),
    # the old first case had batch x seq_len == n_layers x d_model: this was called "left out the layers"
    ("weights", r"counted the weights of W_K and W_V"),
])
def test_kv_cache_bytes_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_kv_cache_bytes(lambda *a: kv_bytes(*a, mistake=mistake))


def test_kv_cache_hints_are_specific_on_the_first_case():
    L, B, T, d, nbytes = ex.KV_CASES[0]
    distinct(list(ex.kv_cache_mistakes(L, B, T, d, nbytes).values()), 2 * L * B * T * d * nbytes)


def test_kv_cache_first_case_tells_the_weights_from_a_cache_without_layers():
    L, B, T, d, _ = ex.KV_CASES[0]
    assert B * T != L * d
