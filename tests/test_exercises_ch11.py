"""exercises.ch11: right answers pass, stubs are pending, each common mistake gets its own hint."""

import math
import re
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


# ---------------------------------------------------------------------- (d) a preallocated KV cache


def make_cache(*, init="empty", dtype="keys", layout="heads", write_at="pos", advance="positions", first="all",
               returns="view", alloc="once", bound="raise", swap=False, shared=False):
    """A reader's preallocated cache class, right by default, with each mistake as a switch."""

    class Cache:
        store = {}  # shared=True keeps the buffers here, on the class

        def __init__(self, max_len):
            self.max_len, self.pos = max_len, 0
            self.k = self.v = None

        def _new(self, like):
            b, h, _, d = like.shape
            shape = (b, self.max_len, h, d) if layout in ("seq", "seq_view") else (b, h, self.max_len, d)
            kw = {} if dtype == "default" else dict(dtype=like.dtype, device=like.device)
            return (torch.zeros if init == "zeros" else torch.empty)(shape, **kw)

        def update(self, k_new, v_new):
            s = k_new.shape[2]
            if swap:
                k_new, v_new = v_new, k_new
            buffers = Cache.store if shared else self.__dict__
            if buffers.get("k") is None or alloc != "once":
                old = (buffers.get("k"), buffers.get("v"))
                buffers["k"], buffers["v"] = self._new(k_new), self._new(v_new)
                if alloc == "every_copy" and old[0] is not None:
                    buffers["k"].copy_(old[0])
                    buffers["v"].copy_(old[1])
            k, v = buffers["k"], buffers["v"]
            if bound == "raise" and self.pos + s > self.max_len:
                raise ValueError(f"{s} new positions do not fit: {self.pos} of max_len={self.max_len} are filled")
            if bound == ">=" and self.pos + s >= self.max_len:
                raise ValueError(f"the cache is full: max_len={self.max_len}")
            if bound == "vague" and self.pos + s > self.max_len:
                raise ValueError("the cache is full")
            if bound == "clip":
                s = min(s, self.max_len - self.pos)
                k_new, v_new = k_new[:, :, :s], v_new[:, :, :s]
            if bound == "grow" and self.pos + s > self.max_len:
                k = self.__dict__["k"] = torch.cat([k, k_new], dim=2)  # a last resort that hides the limit
                v = self.__dict__["v"] = torch.cat([v, v_new], dim=2)
                self.pos += s
                return k, v
            at = {"pos": self.pos, "zero": 0, "plus1": self.pos + 1}[write_at]
            if layout == "seq":  # positions on dim 1, written as if they were on dim 2's place
                k[:, at:at + s], v[:, at:at + s] = k_new, v_new
            elif layout == "seq_view":  # a (batch, seq, heads, d_head) buffer, used consistently: right
                k[:, at:at + s], v[:, at:at + s] = k_new.transpose(1, 2), v_new.transpose(1, 2)
            elif first == "one_slot":
                k[:, :, at:at + 1], v[:, :, at:at + 1] = k_new, v_new
            else:
                k[:, :, at:at + s], v[:, :, at:at + s] = k_new, v_new
            before = self.pos
            self.pos += 1 if advance == "one" else s
            end = {"view": self.pos, "before": before, "buffer": self.max_len}.get(returns, self.pos)
            if layout == "seq_view":
                k_all, v_all = k[:, :end].transpose(1, 2), v[:, :end].transpose(1, 2)
            else:
                k_all, v_all = k[:, :, :end], v[:, :, :end]
            if returns == "new_only":
                k_all, v_all = k[:, :, before:self.pos], v[:, :, before:self.pos]
            if returns == "clone":
                k_all, v_all = k_all.clone(), v_all.clone()
            if returns == "contiguous":
                k_all, v_all = k_all.contiguous(), v_all.contiguous()
            return k_all, v_all

    return Cache


class PreallocatedKVCache:
    """A right answer written differently: one buffer for keys and values, sizes from the first update."""

    def __init__(self, max_len):
        self.max_len, self.filled, self.kv = max_len, 0, None

    def update(self, k_new, v_new):
        if self.kv is None:
            self.kv = k_new.new_zeros((2, *k_new.shape[:2], self.max_len, k_new.shape[3]))
        start, self.filled = self.filled, self.filled + k_new.shape[2]
        if self.filled > self.max_len:
            raise IndexError(f"KV cache overflow: max_len is {self.max_len}")
        self.kv[0, :, :, start:self.filled] = k_new
        self.kv[1, :, :, start:self.filled] = v_new
        return self.kv[0, :, :, :self.filled], self.kv[1, :, :, :self.filled]


@pytest.mark.parametrize("reader", [make_cache(), make_cache(init="zeros"), make_cache(layout="seq_view"),
                                    PreallocatedKVCache])
def test_preallocated_kv_cache_correct(reader, capsys):
    assert ex.check_preallocated_kv_cache(reader, timing=False).passed is True
    out = capsys.readouterr().out
    assert "Correct" in out and "same 13 tokens" in out
    # a view has other strides than torch.cat's tensor: a CPU's matrix product may round differently
    assert "bitwise the same logits" in out or "logits differ in the last bits" in out


def test_preallocated_kv_cache_times_both_without_asserting_a_speed_up(capsys):
    """The timing line says what was measured, where and how, and gives the ratio with its spread."""
    assert ex.check_preallocated_kv_cache(make_cache()).passed is True
    out = capsys.readouterr().out
    assert re.search(r"Timed with speed\.time_interleaved, the chapter's method .* 5 rounds", out)
    assert re.search(r"on this machine now \(.*load average [\d.]+\)", out)
    assert re.search(r"LayerKVCache \(torch\.cat\) [\d.]+ ms \(runs [\d.]+-[\d.]+\), yours [\d.]+ ms \(runs "
                     r"[\d.]+-[\d.]+\): yours [\d.]+x as fast \(round by round [\d.]+x-[\d.]+x; yours", out)


def test_preallocated_kv_cache_is_timed_with_the_chapters_method(monkeypatch, capsys):
    """The check times through speed.time_interleaved and reports its median and range, whatever they are."""
    fake = {"cat": [0.004, 0.002, 0.003, 0.002, 0.002], "mine": [0.001, 0.001, 0.004, 0.001, 0.001]}
    monkeypatch.setattr(speed, "time_interleaved", lambda fns, **kw: {k: fake[k] for k in fns})
    ex.check_preallocated_kv_cache(make_cache())
    out = capsys.readouterr().out
    assert ("LayerKVCache (torch.cat) 2.00 ms (runs 2.00-4.00), yours 1.00 ms (runs 1.00-4.00): yours 2.00x as fast "
            "(round by round 0.75x-4.00x; yours faster in 4 of 5 rounds: no clear difference). No clear gain" in out)


def test_preallocated_kv_cache_stub_is_pending(capsys):
    class Stub:
        def __init__(self, max_len):
            self.max_len = max_len

        def update(self, k_new, v_new):
            raise NotImplementedError

    assert ex.check_preallocated_kv_cache(Stub).passed is False
    assert ex.check_preallocated_kv_cache(stub).passed is False  # a stub constructor
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    (dict(returns="buffer"), r"update 1 of 5 .* you returned the whole buffer, 6 of its positions not written yet"),
    (dict(write_at="zero"), r"update 2 of 5 .*position 0 holds the first position of this update: every update "
                            r"writes at position 0"),
    (dict(write_at="plus1", init="zeros"), r"update 1 of 5 .*position p holds token p - 1\): you write one "
                                           r"position too far"),
    (dict(write_at="plus1"), r"update 1 of 5 .*position p holds token p - 1\): you write one position too far"),
    (dict(alloc="every_copy"), r"update 2 of 5 .*another buffer than at the first update \(its data_ptr\(\) "
                               r"changed\): your update allocates a new buffer"),
    (dict(alloc="every_fresh"), r"update 2 of 5 .*another buffer than at the first update"),
    (dict(layout="seq"), r"raised RuntimeError.*\n\(called with .*update 1 of 5.*\)\. Your buffer self\.k has "
                         r"shape \(2, 10, 3, 4\): its max_len positions run along dim 1"),
    (dict(advance="one"), r"update 1 of 5 .*shape \(2, 3, 1, 4\).*your position counter advances by one per update"),
    (dict(first="one_slot"), r"raised RuntimeError.*\n\(called with .*update 1 of 5.*\)\. The first update brings "
                             r"the whole prompt, 4 positions at once"),
    (dict(returns="before"), r"update 1 of 5 .*shape \(2, 3, 0, 4\).*returned the cache as it was before this "
                             r"update, without its 4 new position"),
    (dict(returns="new_only"), r"update 2 of 5 .*it holds only this update's position"),
    (dict(returns="clone"), r"update 1 of 5 .*k_all is a tensor of its own holding just the 4 filled positions, not a "
                            r"view.*Return a view"),
    (dict(returns="contiguous"), r"k_all is a tensor of its own .*\.contiguous\(\)"),
    (dict(dtype="default"), r"k_all is torch\.float32 on cpu, the keys torch\.float64 on cpu: your buffer has "
                            r"torch's defaults"),
    (dict(swap=True), r"update 1 of 5 .*k_all holds the values and v_all the keys"),
    (dict(shared=True), r"update 2 of 5 .*the cache of layer 0 .*your caches share their buffers"),
    (dict(bound=">="), r"raised ValueError.*\n\(called with .*9 positions cached.*update 5 of 5.*\)\. It refused "
                       r"an update that fits: 9 \+ 1 = 10 positions"),
    # k_new broadcasts into the empty slice past the buffer: PyTorch drops it without an error
    (dict(bound="none"), r"after all 10 positions are filled, an update of 1 more: it returned a tuple of 2: a tensor "
                         r"of shape \(2, 3, 10, 4\).* without an error, so positions past max_len were dropped"),
    (dict(bound="vague"), r"after all 10 positions are filled, .*raised ValueError: the cache is full\n.*it does not "
                          r"name max_len"),
    (dict(bound="grow"), r"after all 10 positions are filled, an update of 1 more: it returned a tuple of 2: a tensor "
                         r"of shape \(2, 3, 11, 4\).* without an error"),
    (dict(bound="clip"), r"after all 10 positions are filled, an update of 1 more: it returned .* without an error"),
])
def test_preallocated_kv_cache_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_preallocated_kv_cache(make_cache(**mistake), timing=False)


def test_preallocated_kv_cache_partial_overflow_and_long_prompt_need_a_clear_error():
    """A bound check that only looks at a full cache lets 9 + 2 through to PyTorch; one that checks only later
    updates lets a prompt longer than the buffer through."""
    class FullOnly(make_cache(bound="none")):
        def update(self, k_new, v_new):
            if self.pos == self.max_len:
                raise ValueError(f"the cache is full: max_len={self.max_len}")
            return super().update(k_new, v_new)

    with pytest.raises(ExerciseFailed, match=r"with 9 of 10 positions filled, an update of 2 .*\n.*this one is "
                                             r"PyTorch's, from writing past the end of the buffer"):
        ex.check_preallocated_kv_cache(FullOnly, timing=False)

    class LaterOnly(make_cache(bound="none")):
        def update(self, k_new, v_new):
            if self.pos and self.pos + k_new.shape[2] > self.max_len:
                raise ValueError(f"the cache is full: max_len={self.max_len}")
            return super().update(k_new, v_new)

    with pytest.raises(ExerciseFailed, match=r"a first update of 12 positions \(a prompt longer than max_len 10\): "
                                             r"it raised RuntimeError"):
        ex.check_preallocated_kv_cache(LaterOnly, timing=False)


def test_preallocated_kv_cache_other_wrong_answers():
    class Single(make_cache()):
        def update(self, k_new, v_new):
            return super().update(k_new, v_new)[0]

    with pytest.raises(ExerciseFailed, match=r"should return \(k_all, v_all\), two tensors.*returned a tensor"):
        ex.check_preallocated_kv_cache(Single, timing=False)

    class NoneFirst(make_cache()):
        def update(self, k_new, v_new):
            self.k[:, :, 0:1] = k_new  # before any buffer exists
            return super().update(k_new, v_new)

    with pytest.raises(ExerciseFailed, match=r"raised TypeError.*\n\(called with k_new and v_new \(2, 3, 4, 4\) "
                                             r"torch\.float64, 0 positions cached, max_len 10.*Allocate the buffers"):
        ex.check_preallocated_kv_cache(NoneFirst, timing=False)

    class Scaled(make_cache()):
        def update(self, k_new, v_new):
            return super().update(k_new * 2, v_new)

    with pytest.raises(ExerciseFailed, match=r"position 0 holds numbers that are none of the keys and values given "
                                             r"so far"):
        ex.check_preallocated_kv_cache(Scaled, timing=False)


def test_preallocated_kv_cache_counter_shared_between_caches():
    """A position counter shared between instances: the two caches updated in turn see it."""
    class SharedCounter(make_cache()):
        count = 0

        def update(self, k_new, v_new):
            self.pos = SharedCounter.count
            out = super().update(k_new, v_new)
            SharedCounter.count = self.pos
            return out

    with pytest.raises(ExerciseFailed, match=r"layer 1 of 2"):
        ex.check_preallocated_kv_cache(SharedCounter, timing=False)


def test_preallocated_kv_cache_inputs_tell_every_position_apart():
    """Every position of every layer's keys and values differs from every other, so the position map is exact."""
    vectors = [t[:, :, j] for k, v in ex.pre_cache_inputs() for t in (k, v) for j in range(ex.PRE_MAX_LEN)]
    for i, a in enumerate(vectors):
        assert a.any()
        assert not any(torch.equal(a, b) for b in vectors[i + 1:])
    sizes = {ex.PRE_BATCH, ex.PRE_N_HEADS, ex.PRE_D_HEAD, ex.PRE_MAX_LEN}
    assert len(sizes) == 4 and sum(ex.PRE_UPDATES) == ex.PRE_MAX_LEN and ex.PRE_UPDATES[0] > 1
    assert len(ex.PRE_UPDATES) not in (ex.PRE_MAX_LEN, ex.PRE_UPDATES[0])  # updates are not positions


def test_preallocated_kv_cache_leaves_the_readers_rng_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    ex.check_preallocated_kv_cache(make_cache(), timing=False)
    assert torch.equal(torch.get_rng_state(), before)


def test_preallocated_kv_cache_in_the_model():
    """The model's caches get max_len = n_ctx = 16 and float32 keys: a cache that ignores its max_len fails there
    with the error it raises, and one that goes wrong only on the model's keys generates other tokens."""
    class TenPositions(make_cache()):
        def __init__(self, max_len):
            super().__init__(10)

    with pytest.raises(ExerciseFailed, match=r"TenPositions\.update raised ValueError inside a GPT-2 model \(2 "
                                             r"layers, k_new \(2, 3, 1, 8\) torch\.float32, 10 positions cached; "
                                             r"each layer's cache made as TenPositions\(16\), the model's n_ctx\): "
                                             r".*max_len=10"):
        ex.check_preallocated_kv_cache(TenPositions, timing=False)

    class Float32Only(make_cache()):
        def update(self, k_new, v_new):
            return super().update(k_new * 3 if k_new.dtype == torch.float32 else k_new, v_new)

    with pytest.raises(ExerciseFailed, match=r"Float32Only in every layer of a GPT-2 .*float32.* generates the same "
                                             r"tokens as LayerKVCache, but other logits \(largest difference"):
        ex.check_preallocated_kv_cache(Float32Only, timing=False)

    class Float32Values(make_cache()):
        def update(self, k_new, v_new):
            return super().update(k_new, v_new * 10 if v_new.dtype == torch.float32 else v_new)

    with pytest.raises(ExerciseFailed, match=r"Float32Values in every layer of a GPT-2 .* generates other tokens than "
                                             r"LayerKVCache from new token \d+ on"):
        ex.check_preallocated_kv_cache(Float32Values, timing=False)
