"""The position-scheme interface: a new scheme plugs into every attention kernel unchanged.

``ConstantBias`` below is a toy scheme written here, outside the library, the way a new one (ALiBi)
would be: a subclass of ``tl.PositionScheme`` and, to be named in a config, one entry in the
registry. Nothing in ``layers/attention.py`` or the kernels knows about it. Its bias is constant
(it depends on the positions only, never on the tokens) but not the same for every pair of
positions: a bias that is one number for a whole row of scores would vanish in the softmax, and a
test built on it could not fail. Every kernel is checked against attention computed here from the
module's weights with plain matrix products and a softmax.
"""

import math

import pytest
import torch

import transformer_lib as tl
from transformer_lib.layers.kv_cache import LayerKVCache
from transformer_lib.layers.position_registry import POSITIONALS

from .conftest import close

D_MODEL, N_HEADS, N_POSITIONS = 32, 4, 16


class ConstantBias(tl.PositionScheme):
    """A fixed score bias per head and (query position, key position)."""

    def __init__(self, n_heads: int, n_positions: int, seed: int = 0) -> None:
        super().__init__()
        table = 2 * torch.randn(n_heads, n_positions, n_positions, generator=torch.Generator().manual_seed(seed))
        self.register_buffer("table", table, persistent=False)

    def check_fits(self, n_heads: int, d_head: int) -> None:
        if n_heads != self.table.shape[0]:
            raise ValueError(f"ConstantBias has a bias for {self.table.shape[0]} heads, attention has {n_heads}")

    def score_bias(self, q, k, offset=0):
        return self.table[:, offset : offset + q.shape[-2], : k.shape[-2]]  # (n_heads, seq_q, seq_k)


def rotated(t, base=10000.0):
    """RoPE in complex numbers: feature pair (2i, 2i+1) at position m times exp(i m theta_i)."""
    d = t.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(t.shape[-2], dtype=torch.float64)[:, None] * theta  # (seq, d/2)
    pairs = torch.view_as_complex(t.double().reshape(*t.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2).float()


def reference(mha: tl.MultiHeadAttention, x, table=None, keep=None, causal=True, weights_out=None, rope=False):
    """softmax(q k^T / sqrt(d_head) + table + mask) v, merged and through W_O, written out here."""
    B, T, _ = x.shape
    H, d = mha.n_heads, mha.d_head

    def heads(linear):  # (batch, seq, d_model) -> (batch, heads, seq, d_head)
        return (x @ linear.weight.T + linear.bias).view(B, T, H, d).permute(0, 2, 1, 3)

    q, k, v = heads(mha.W_Q), heads(mha.W_K), heads(mha.W_V)
    if rope:
        q, k = rotated(q), rotated(k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if table is not None:
        scores = scores + table[:, :T, :T]
    hidden = torch.zeros(B, 1, T, T, dtype=torch.bool)
    if causal:
        hidden |= torch.ones(T, T, dtype=torch.bool).triu(1)
    if keep is not None:  # (batch, seq): 1 = token, 0 = padding (a hidden key)
        hidden |= (keep == 0)[:, None, None, :]
    weights = scores.masked_fill(hidden, -math.inf).softmax(-1)
    if weights_out is not None:
        weights_out.append(weights)
    out = (weights @ v).permute(0, 2, 1, 3).reshape(B, T, H * d)
    return out @ mha.W_O.weight.T + mha.W_O.bias


def attention_pair(kind="causal", dropout=0.0):
    """The toy scheme in a written-out and a use_sdpa layer with the same weights."""
    scheme = ConstantBias(N_HEADS, N_POSITIONS)
    explicit = tl.MultiHeadAttention(D_MODEL, N_HEADS, kind=kind, positions=scheme, dropout=dropout)
    fast = tl.MultiHeadAttention(D_MODEL, N_HEADS, kind=kind, positions=scheme, dropout=dropout, use_sdpa=True)
    fast.load_state_dict(explicit.state_dict())
    return scheme, explicit.eval(), fast.eval()


def run_with_cache(mha, x, first=4):
    """The first ``first`` positions in one call, then one position per call (generation)."""
    cache = LayerKVCache()
    steps = [mha(x[:, :first], kv_cache=cache)]
    steps += [mha(x[:, i : i + 1], kv_cache=cache) for i in range(first, x.shape[1])]
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize("kind", ["causal", "bidirectional"])
def test_a_score_bias_scheme_works_on_every_kernel(kind):
    scheme, explicit, fast = attention_pair(kind)
    causal = kind == "causal"
    x = torch.randn(2, 9, D_MODEL)
    keep = torch.ones(2, 9, dtype=torch.long)
    keep[1, -3:] = 0
    padding = tl.padding_mask(keep)
    with torch.no_grad():
        for mask, keep_ in ((None, None), (padding, keep)):
            expected = reference(explicit, x, scheme.table, keep_, causal)
            assert (expected - reference(explicit, x, None, keep_, causal)).abs().max() > 0.1  # the bias matters
            assert explicit.kernel(None, None) == "explicit" and fast.kernel(None, None) == "fused"
            close(explicit(x, mask=mask), expected)
            close(fast(x, mask=mask), expected)


def test_a_score_bias_scheme_with_a_kv_cache_on_the_explicit_and_sdpa_kernels():
    scheme, explicit, fast = attention_pair("causal")
    x = torch.randn(2, 9, D_MODEL)
    assert fast.kernel(None, LayerKVCache()) == "sdpa"
    with torch.no_grad():
        expected = reference(explicit, x, scheme.table)
        close(run_with_cache(explicit, x), expected)  # query i at position offset + i
        close(run_with_cache(fast, x), expected)


def test_a_score_bias_scheme_gives_the_same_gradients_on_the_fused_kernel():
    _, explicit, fast = attention_pair("causal")
    x = torch.randn(2, 9, D_MODEL)
    for mha in (explicit, fast):
        mha(x).square().sum().backward()
    for (name, a), b in zip(explicit.named_parameters(), fast.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=f"gradient of {name}")


def test_capture_attention_records_the_biased_weights():
    scheme, _, fast = attention_pair("causal")
    x = torch.randn(2, 9, D_MODEL)
    expected = []
    with torch.no_grad(), tl.capture_attention(fast) as maps:
        out = fast(x)
        close(out, reference(fast, x, scheme.table, weights_out=expected))
    close(maps["MultiHeadAttention"], expected[0])


def test_a_score_bias_scheme_with_dropout_on_every_kernel():
    """In training every kernel applies the bias and dropout: averaged over draws, the eval output."""
    _, explicit, fast = attention_pair("causal", dropout=0.3)
    x = torch.randn(1, 6, D_MODEL).expand(4000, 6, D_MODEL)  # one sequence, 4000 dropout draws
    with torch.no_grad():
        expected = explicit(x[:1])
        for mha in (explicit.train(), fast.train()):
            draws = mha(x)
            assert (draws[0] - draws[1]).abs().max() > 1e-3  # dropout is on
            close(draws.mean(0, keepdim=True), expected, atol=0.03, rtol=0.05)


def test_rope_through_the_same_interface_on_every_kernel():
    """The library's own rotating scheme, against rotations written here with complex numbers."""
    rope = tl.RotaryEmbedding(D_MODEL // N_HEADS, N_POSITIONS)
    explicit = tl.MultiHeadAttention(D_MODEL, N_HEADS, kind="causal", positions=rope).eval()
    fast = tl.MultiHeadAttention(D_MODEL, N_HEADS, kind="causal", positions=rope, use_sdpa=True).eval()
    fast.load_state_dict(explicit.state_dict())
    x = torch.randn(2, 9, D_MODEL)
    with torch.no_grad():
        expected = reference(explicit, x, rope=True)
        assert (expected - reference(explicit, x)).abs().max() > 0.01  # the rotation matters
        for output in (explicit(x), fast(x), run_with_cache(explicit, x), run_with_cache(fast, x)):
            close(output, expected)


def test_the_scheme_is_refused_where_it_cannot_work():
    with pytest.raises(ValueError, match="ConstantBias has a bias for 4 heads, attention has 8"):
        tl.MultiHeadAttention(D_MODEL, 8, positions=ConstantBias(4, N_POSITIONS))
    with pytest.raises(ValueError, match="positions are not applied in cross-attention"):
        tl.MultiHeadAttention(D_MODEL, N_HEADS, kind="cross", positions=ConstantBias(N_HEADS, N_POSITIONS))
    with pytest.raises(TypeError, match="positions must be a PositionScheme .* got str"):
        tl.MultiHeadAttention(D_MODEL, N_HEADS, positions="rope")


def test_a_registered_scheme_builds_a_model_by_name(monkeypatch):
    """One line in the registry: GPT2Config(positional="constant_bias") builds a model that uses it."""
    monkeypatch.setitem(POSITIONALS, "constant_bias", lambda c: (None, ConstantBias(c.n_heads, c.n_ctx)))
    config = tl.GPT2Config(vocab_size=50, n_ctx=N_POSITIONS, d_model=D_MODEL, n_layers=2, n_heads=N_HEADS,
                           positional="constant_bias")
    model = tl.GPT2(config).eval()
    assert model.position_embedding is None and isinstance(model.positions, ConstantBias)
    assert all(block.attn.positions is model.positions for block in model.blocks)
    assert model.rope is None
    fast = tl.GPT2(config).eval()
    fast.load_state_dict(model.state_dict())
    ids = torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        logits = model(ids)
        with tl.fast_path(fast):
            close(fast(ids), logits)
        cache = model.new_kv_cache()
        cached = torch.cat([model(ids[:, :5], kv_cache=cache)]
                           + [model(ids[:, i : i + 1], kv_cache=cache) for i in range(5, 12)], dim=1)
        close(cached, logits)
    with pytest.raises(ValueError, match="positional must be one of"):
        tl.GPT2Config(positional="sideways")  # not registered
