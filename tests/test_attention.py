"""layers.attention and layers.masks against torch's own attention."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_lib as tl
from transformer_lib.layers.kv_cache import LayerKVCache

from .conftest import assert_unchanged, close, snapshot


def qkv(b=2, h=3, sq=5, sk=7, d=8):
    return torch.randn(b, h, sq, d), torch.randn(b, h, sk, d), torch.randn(b, h, sk, d)


@pytest.mark.parametrize("mask_shape", [None, (5, 7), (2, 1, 5, 7), (2, 3, 5, 7), (2, 1, 1, 7)])
def test_sdpa_matches_torch(mask_shape):
    q, k, v = qkv()
    mask = None
    if mask_shape is not None:
        mask = torch.rand(mask_shape) > 0.3
        mask[..., 0] = True  # every query keeps at least one key
    out, weights = tl.scaled_dot_product_attention(q, k, v, mask)
    close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    close(weights.sum(-1), torch.ones(2, 3, 5))
    if mask is not None:
        assert (weights[~mask.expand_as(weights)] == 0).all()


def test_sdpa_causal_matches_torch_is_causal():
    q, k, v = qkv(sq=6, sk=6)
    out, weights = tl.scaled_dot_product_attention(q, k, v, tl.causal_mask(6))
    close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert torch.equal(weights.triu(1), torch.zeros_like(weights))


def test_fully_masked_query_gives_zeros_not_nan():
    q, k, v = qkv(sq=3, sk=3)
    mask = torch.tensor([[False, False, False], [True, False, False], [True, True, True]])
    out, weights = tl.scaled_dot_product_attention(q, k, v, mask)
    assert not out.isnan().any()
    assert (out[..., 0, :] == 0).all() and (weights[..., 0, :] == 0).all()
    close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_causal_mask_with_offset():
    # 2 new queries after 3 cached positions: query i sits at absolute position 3 + i
    expected = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(tl.causal_mask(2, 5), expected)
    assert torch.equal(tl.causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())


def test_padding_mask_shape_and_values():
    m = tl.padding_mask(torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert m.shape == (2, 1, 1, 3) and m.dtype == torch.bool
    assert m[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]


def copy_into_torch_mha(ours: tl.MultiHeadAttention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(ours.d_model, ours.n_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.W_Q.weight, ours.W_K.weight, ours.W_V.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.W_Q.bias, ours.W_K.bias, ours.W_V.bias]))
        ref.out_proj.weight.copy_(ours.W_O.weight)
        ref.out_proj.bias.copy_(ours.W_O.bias)
    return ref.eval()


@pytest.mark.parametrize("use_sdpa", [False, True])
def test_mha_matches_nn_multihead_attention(use_sdpa):
    ours = tl.MultiHeadAttention(32, 4, kind="bidirectional", use_sdpa=use_sdpa).eval()
    ref = copy_into_torch_mha(ours)
    x = torch.randn(3, 6, 32)
    keep = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]])
    expected, _ = ref(x, x, x, key_padding_mask=keep == 0)
    actual = ours(x, mask=tl.padding_mask(keep))
    close(actual, expected)


def test_causal_mha_matches_nn_multihead_attention():
    ours = tl.MultiHeadAttention(32, 4, kind="causal").eval()
    ref = copy_into_torch_mha(ours)
    x = torch.randn(2, 6, 32)
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)  # torch: True = NOT allowed
    expected, _ = ref(x, x, x, attn_mask=future)
    close(ours(x), expected)


def test_cross_mha_matches_nn_multihead_attention():
    ours = tl.MultiHeadAttention(32, 4, kind="cross").eval()
    ref = copy_into_torch_mha(ours)
    x, ctx = torch.randn(2, 5, 32), torch.randn(2, 9, 32)
    keep = torch.ones(2, 9, dtype=torch.long)
    keep[1, 6:] = 0
    expected, _ = ref(x, ctx, ctx, key_padding_mask=keep == 0)
    close(ours(x, context=ctx, mask=tl.padding_mask(keep)), expected)


@pytest.mark.parametrize("kind", ["bidirectional", "causal", "cross"])
def test_explicit_and_fast_paths_agree(kind):
    explicit = tl.MultiHeadAttention(32, 4, kind=kind).eval()
    fast = tl.MultiHeadAttention(32, 4, kind=kind, use_sdpa=True).eval()
    fast.load_state_dict(explicit.state_dict())
    x = torch.randn(2, 7, 32)
    ctx = torch.randn(2, 5, 32) if kind == "cross" else None
    n_k = 5 if kind == "cross" else 7
    keep = torch.ones(2, n_k, dtype=torch.long)
    keep[0, -2:] = 0
    for mask in (None, tl.padding_mask(keep)):
        close(fast(x, context=ctx, mask=mask), explicit(x, context=ctx, mask=mask))


def test_explicit_and_fast_paths_agree_with_kv_cache():
    explicit = tl.MultiHeadAttention(32, 4, kind="causal").eval()
    fast = tl.MultiHeadAttention(32, 4, kind="causal", use_sdpa=True).eval()
    fast.load_state_dict(explicit.state_dict())
    x = torch.randn(2, 7, 32)
    for module in (explicit, fast):
        cache = LayerKVCache()
        steps = [module(x[:, :4], kv_cache=cache)] + [module(x[:, i : i + 1], kv_cache=cache) for i in range(4, 7)]
        close(torch.cat(steps, dim=1), explicit(x))


def test_masks_for_batch_greater_than_one_are_per_example():
    """Each batch element's padding must affect that element only."""
    mha = tl.MultiHeadAttention(16, 2, kind="causal").eval()
    a, b = torch.randn(1, 6, 16), torch.randn(1, 6, 16)
    keep = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    out = mha(torch.cat([a, b]), mask=tl.padding_mask(keep))
    close(out[0:1], mha(a))
    close(out[1:2, :3], mha(b[:, :3]))


def test_attention_dropout_only_in_training():
    mha = tl.MultiHeadAttention(16, 2, dropout=0.5)
    x = torch.randn(2, 6, 16)
    mha.eval()
    close(mha(x), mha(x))
    mha.train()
    assert not torch.allclose(mha(x), mha(x))


def test_capture_attention_records_every_layer_and_head():
    model = tl.GPT2(tl.GPT2Config(vocab_size=50, n_ctx=16, d_model=32, n_layers=3, n_heads=4, use_sdpa=True)).eval()
    ids = torch.randint(0, 50, (2, 9))
    with tl.capture_attention(model) as maps:
        logits = model(ids)
    assert list(maps) == ["blocks.0.attn", "blocks.1.attn", "blocks.2.attn"]
    for w in maps.values():
        assert w.shape == (2, 4, 9, 9)
        close(w.sum(-1), torch.ones(2, 4, 9))
        assert torch.equal(w.triu(1), torch.zeros_like(w))  # causal: nothing above the diagonal
    close(logits, model(ids))  # capturing does not change the result
    model(ids)
    assert len(maps) == 3 and all(m._capture is None for m in model.modules() if isinstance(m, tl.MultiHeadAttention))


def test_bad_mask_leaves_the_kv_cache_untouched():
    mha = tl.MultiHeadAttention(16, 2, kind="causal").eval()
    cache = LayerKVCache()
    mha(torch.randn(1, 3, 16), kv_cache=cache)
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(torch.randn(1, 1, 16), kv_cache=cache, mask=torch.ones(1, 1, 1, 5, dtype=torch.bool))
    assert cache.seq_len == 3


def test_nested_capture_attention():
    model = tl.GPT2(tl.GPT2Config(vocab_size=50, n_ctx=16, d_model=32, n_layers=2, n_heads=4)).eval()
    ids = torch.randint(0, 50, (1, 5))
    with tl.capture_attention(model) as outer:
        with tl.capture_attention(model) as inner:
            model(ids)
        model(ids)
    assert len(inner) == 2 and len(outer) == 2


def test_attention_forward_mutates_nothing():
    rope = tl.RotaryEmbedding(8, 16)
    mha = tl.MultiHeadAttention(32, 4, kind="causal", positions=rope, dropout=0.1)
    before = snapshot(mha)
    mha(torch.randn(2, 6, 32), mask=tl.padding_mask(torch.tensor([[1] * 6, [1] * 4 + [0] * 2])))
    mha.eval()
    cache = LayerKVCache()
    mha(torch.randn(2, 3, 32), kv_cache=cache)
    mha(torch.randn(2, 1, 32), kv_cache=cache)
    assert_unchanged(mha, before)


# ---- errors -----------------------------------------------------------------------------------


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by n_heads \(4\)"):
        tl.MultiHeadAttention(30, 4)


def test_unknown_kind():
    with pytest.raises(ValueError, match=r"kind must be one of \['bidirectional', 'causal', 'cross'\]"):
        tl.MultiHeadAttention(32, 4, kind="sideways")


def test_cross_attention_needs_context():
    mha = tl.MultiHeadAttention(32, 4, kind="cross")
    with pytest.raises(ValueError, match="cross-attention needs a context"):
        mha(torch.randn(2, 5, 32))
    with pytest.raises(ValueError, match="context is only used by kind='cross'"):
        tl.MultiHeadAttention(32, 4)(torch.randn(2, 5, 32), context=torch.randn(2, 5, 32))


def test_mask_dtype_and_shape_errors():
    mha = tl.MultiHeadAttention(32, 4)
    x = torch.randn(2, 5, 32)
    with pytest.raises(TypeError, match="mask must have dtype torch.bool"):
        mha(x, mask=torch.ones(5, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\) does not broadcast .* \(2, 4, 5, 5\)"):
        mha(x, mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"does not broadcast"):
        mha(x, mask=torch.ones(3, 1, 1, 5, dtype=torch.bool))  # batch 3 vs 2
    with pytest.raises(ValueError, match=r"attention_mask must contain only 0 \(padding\) and 1"):
        tl.padding_mask(torch.tensor([[1, 2, 0]]))
    with pytest.raises(TypeError, match="attention_mask must be bool or integer"):
        tl.padding_mask(torch.tensor([[1.0, 0.0]]))


def test_input_width_error():
    with pytest.raises(ValueError, match=r"x must have shape \(batch, seq, d_model=32\), got \(2, 5, 16\)"):
        tl.MultiHeadAttention(32, 4)(torch.randn(2, 5, 16))


def test_non_float_input_and_context_errors():
    with pytest.raises(TypeError, match=r"x must hold floating-point numbers \(torch.float32.*x.float\(\)"):
        tl.MultiHeadAttention(32, 4)(torch.zeros(2, 5, 32, dtype=torch.long))
    with pytest.raises(TypeError, match=r"context must be a torch.Tensor"):
        tl.MultiHeadAttention(32, 4, kind="cross")(torch.randn(2, 5, 32), context=[1, 2])
    with pytest.raises(TypeError, match=r"dropout must be a float in \[0, 1\), got str"):
        tl.MultiHeadAttention(32, 4, dropout="0.1")


def test_sdpa_function_shape_errors():
    with pytest.raises(ValueError, match="same last dimension d_k"):
        tl.scaled_dot_product_attention(torch.randn(1, 3, 4), torch.randn(1, 3, 5), torch.randn(1, 3, 5))


# ---- the fused attention kernel for training (chapter 11) -----------------------------------------


@pytest.mark.parametrize("overrides", [{}, {"positional": "rope"}])
def test_fused_attention_gives_the_same_gradients(overrides):
    explicit = tl.GPT2(tl.GPT2Config(vocab_size=50, n_ctx=16, d_model=32, n_layers=2, n_heads=4, **overrides)).train()
    fast = tl.GPT2(tl.GPT2Config(**{**explicit.config.to_dict(), "use_sdpa": True})).train()
    fast.load_state_dict(explicit.state_dict())
    ids = torch.randint(0, 50, (3, 16))
    losses = [m.loss(ids[:, :-1], ids[:, 1:]) for m in (explicit, fast)]
    for loss in losses:
        loss.backward()
    close(losses[1], losses[0])
    for (name, a), b in zip(explicit.named_parameters(), fast.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-6, rtol=1e-4, msg=f"gradient of {name}")


@pytest.mark.slow
def test_cpu_attention_dropout_keeps_each_weight_with_probability_1_minus_p():
    """The fast path's attention dropout on a CPU: kept weights scaled by 1 / (1 - p), unbiased."""
    from transformer_lib.layers.fused_attention import causal_attention_with_dropout

    torch.manual_seed(0)
    T, p = 8, 0.25
    q, k = torch.randn(2, 3, T, 4), torch.randn(2, 3, T, 4)
    v = torch.eye(T).expand(2, 3, T, T)  # each output row is that query's weights, after dropout
    weights = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    draws = torch.stack([causal_attention_with_dropout(q, k, v, p) for _ in range(1000)])
    visible = (weights > 0).expand_as(draws)
    kept = draws[visible] != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.005
    close(draws[visible][kept], (weights / (1 - p)).expand_as(draws)[visible][kept])
    assert (draws[~visible] == 0).all()  # the future stays hidden
    close(draws.mean(0), weights, atol=1e-3, rtol=0.08)  # 4 standard errors of the mean of 1000 draws
    torch.testing.assert_close(causal_attention_with_dropout(q, k, v, 1e-9), weights, atol=1e-6, rtol=1e-5)


def test_fast_path_uses_the_cpu_attention_dropout_while_training(monkeypatch):
    import transformer_lib.layers.fused_attention as fused

    calls = []
    real = fused.causal_attention_with_dropout
    monkeypatch.setattr(fused, "causal_attention_with_dropout", lambda *a: calls.append(a[-1]) or real(*a))
    model = tl.GPT2(tl.GPT2Config(vocab_size=50, n_ctx=16, d_model=32, n_layers=2, n_heads=4, dropout=0.2))
    ids = torch.randint(0, 50, (3, 16))
    with tl.fast_path(model):
        model.eval()(ids)
        assert calls == []  # no dropout in eval mode: the fused kernel
        model.train().loss(ids[:, :-1], ids[:, 1:]).backward()
    assert calls == [0.2, 0.2]
    assert all(p.grad is not None for n, p in model.named_parameters() if ".attn.W_" in n)


# ---- a position scheme added from outside: the interface is all attention needs -----------------
class ConstantBias(tl.PositionScheme):
    """A toy scheme, defined here and nowhere in the library: a fixed score bias per head and pair
    of positions (any table that does not depend on the input; ALiBi's is one such table)."""

    def __init__(self, n_heads: int, n_ctx: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.register_buffer("table", 2 * torch.randn(n_heads, n_ctx, n_ctx, generator=g))

    def score_bias(self, q, k, offset=0):
        return self.table[:, offset : offset + q.shape[-2], : k.shape[-2]]  # (n_heads, seq_q, seq_k)


def biased_reference(attn, x, bias):
    """Causal attention with ``bias`` added to the scores, from the weights and torch's SDPA."""
    h = attn.n_heads
    q, k, v = (W(x).unflatten(-1, (h, -1)).transpose(1, 2) for W in (attn.W_Q, attn.W_K, attn.W_V))
    T = x.shape[1]
    hidden = ~torch.ones(T, T, dtype=torch.bool).tril()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias[:, :T, :T].masked_fill(hidden, float("-inf")))
    return attn.W_O(out.transpose(1, 2).flatten(2))


def test_a_new_position_scheme_works_on_every_kernel_without_touching_attention():
    torch.manual_seed(0)
    n_heads, T = 4, 9
    scheme = ConstantBias(n_heads, n_ctx=16)
    attn = tl.MultiHeadAttention(32, n_heads, kind="causal", positions=scheme).eval()
    x = torch.randn(2, T, 32)
    expected = biased_reference(attn, x, scheme.table)
    unbiased = biased_reference(attn, x, torch.zeros_like(scheme.table))
    assert (expected - unbiased).abs().max() > 0.1  # the bias matters: a test that can fail

    assert attn.kernel(None, None) == "explicit"
    close(attn(x), expected)
    attn.use_sdpa = True
    assert attn.kernel(None, None) == "fused"
    close(attn(x), expected)
    # "sdpa": with a KV cache, 5 positions then 4 (the bias rows of the new queries: offset 5)
    cache = LayerKVCache()
    assert attn.kernel(None, cache) == "sdpa"
    first = attn(x[:, :5], kv_cache=cache)
    close(torch.cat([first, attn(x[:, 5:], kv_cache=cache)], dim=1), expected)
    # and the explicit kernel with the cache
    attn.use_sdpa = False
    cache = LayerKVCache()
    close(torch.cat([attn(x[:, :5], kv_cache=cache), attn(x[:, 5:], kv_cache=cache)], dim=1), expected)


def test_a_new_position_scheme_joins_the_models_through_the_registry(monkeypatch):
    """One line in POSITIONALS: a GPT-2 with the scheme, its fast path and its KV cache agree."""
    from transformer_lib.layers import position_registry

    monkeypatch.setitem(position_registry.POSITIONALS, "constant_bias",
                        lambda c: (None, ConstantBias(c.n_heads, c.n_ctx)))
    torch.manual_seed(0)
    model = tl.GPT2(tl.GPT2Config(vocab_size=50, n_ctx=16, d_model=32, n_layers=2, n_heads=4,
                                  positional="constant_bias")).eval()
    ids = torch.randint(0, 50, (2, 12))
    logits = model(ids)
    with tl.fast_path(model, attention=True):
        close(model(ids), logits)
    cache = tl.KVCache(n_layers=2)
    steps = [model(ids[:, :7], kv_cache=cache)]
    steps += [model(ids[:, t : t + 1], kv_cache=cache) for t in range(7, 12)]
    close(torch.cat(steps, dim=1), logits)


def test_a_position_scheme_whose_bias_does_not_fit_is_named():
    class WrongBias(tl.PositionScheme):
        def score_bias(self, q, k, offset=0):
            return torch.zeros(3, 3)  # a table for 3 positions, whatever the sequence

    attn = tl.MultiHeadAttention(16, 2, kind="causal", positions=WrongBias())
    for fast in (False, True):
        attn.use_sdpa = fast
        with pytest.raises(ValueError, match=r"WrongBias.score_bias returned \(3, 3\).*\(1, 2, 5, 5\)"):
            attn(torch.randn(1, 5, 16))
