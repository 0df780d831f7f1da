"""layers.alibi: the slopes against the paper's code and Hugging Face's BLOOM, attention against a
written-out reference on every kernel and with a KV cache, and a model that reads past its training length."""

import math

import pytest
import torch
from transformers.models.bloom.modeling_bloom import build_alibi_tensor

import transformer_lib as tl
from transformer_lib.layers.kv_cache import LayerKVCache

from .conftest import assert_unchanged, close, snapshot

D_MODEL, N_HEADS = 32, 4


def paper_slopes(n):
    """get_slopes from the ALiBi paper's repository (ofirpress/attention_with_linear_biases), as written there."""
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio ** i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest_power_of_2) + paper_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]


@pytest.mark.parametrize("n_heads", range(1, 17))
def test_slopes_match_the_papers_code_and_bloom(n_heads):
    ours = tl.layers.alibi_slopes(n_heads)
    assert torch.allclose(ours.double(), torch.tensor(paper_slopes(n_heads), dtype=torch.float64), rtol=1e-6)
    bloom = build_alibi_tensor(torch.ones(1, 3), n_heads, torch.float32)  # (heads, 1, seq): slope * key position
    assert torch.allclose(bloom[:, 0, 1], ours.float(), rtol=1e-6)


def heads(linear, x, n_heads):
    B, T, _ = x.shape
    return (x @ linear.weight.T + linear.bias).view(B, T, n_heads, -1).permute(0, 2, 1, 3)


def bloom_reference(mha, x, keep=None):
    """Causal attention with BLOOM's bias, slope * (key position): it differs from -slope * (i - j) by
    slope * i, the same for a whole row of scores, which the softmax ignores. Written out here."""
    B, T, _ = x.shape
    q, k, v = (heads(W, x, mha.n_heads) for W in (mha.W_Q, mha.W_K, mha.W_V))
    scores = q @ k.transpose(-2, -1) / math.sqrt(mha.d_head)
    alibi = build_alibi_tensor(torch.ones(B, T) if keep is None else keep, mha.n_heads, torch.float32)
    scores = scores + alibi.view(B, mha.n_heads, 1, T)
    hidden = torch.ones(T, T, dtype=torch.bool).triu(1).expand(B, 1, T, T)
    if keep is not None:
        hidden = hidden | (keep == 0)[:, None, None, :]
    weights = scores.masked_fill(hidden, -math.inf).softmax(-1)
    return (weights @ v).permute(0, 2, 1, 3).reshape(B, T, -1) @ mha.W_O.weight.T + mha.W_O.bias


def symmetric_reference(mha, x):
    """Bidirectional attention with -slope * |i - j| on the scores, written out."""
    T = x.shape[1]
    q, k, v = (heads(W, x, mha.n_heads) for W in (mha.W_Q, mha.W_K, mha.W_V))
    pos = torch.arange(T)
    slopes = torch.tensor(paper_slopes(mha.n_heads))
    bias = -slopes[:, None, None] * (pos[:, None] - pos[None, :]).abs()
    weights = (q @ k.transpose(-2, -1) / math.sqrt(mha.d_head) + bias).softmax(-1)
    return (weights @ v).permute(0, 2, 1, 3).reshape(*x.shape[:2], -1) @ mha.W_O.weight.T + mha.W_O.bias


def pair(kind="causal", n_heads=N_HEADS):
    explicit = tl.MultiHeadAttention(D_MODEL, n_heads, kind=kind, positions=tl.ALiBi(n_heads))
    fast = tl.MultiHeadAttention(D_MODEL, n_heads, kind=kind, positions=tl.ALiBi(n_heads), use_sdpa=True)
    fast.load_state_dict(explicit.state_dict())
    return explicit.eval(), fast.eval()


@pytest.mark.parametrize("n_heads", [4, 8])  # 8: slopes down to 2^-8, the paper's range
def test_causal_alibi_matches_bloom_on_every_kernel(n_heads):
    explicit, fast = pair("causal", n_heads)
    x = torch.randn(2, 11, D_MODEL)
    keep = torch.ones(2, 11, dtype=torch.long)
    keep[1, -3:] = 0  # right padding
    with torch.no_grad():
        plain = tl.MultiHeadAttention(D_MODEL, n_heads, kind="causal").eval()
        plain.load_state_dict(explicit.state_dict())
        assert (explicit(x) - plain(x)).abs().max() > 0.05  # the bias matters
        for mha in (explicit, fast):
            close(mha(x), bloom_reference(mha, x))
            padded = mha(x, mask=tl.padding_mask(keep))
            close(padded[:, :8], bloom_reference(mha, x, keep)[:, :8])  # the real tokens


def test_bidirectional_alibi_penalises_both_directions_on_every_kernel():
    explicit, fast = pair("bidirectional")
    x = torch.randn(2, 7, D_MODEL)
    with torch.no_grad():
        for mha in (explicit, fast):
            close(mha(x), symmetric_reference(mha, x))


def test_alibi_with_a_kv_cache_equals_recomputation():
    """Query i sits at position offset + i: generation token by token gives the full pass's outputs."""
    for mha in pair("causal"):
        x = torch.randn(2, 9, D_MODEL)
        cache = LayerKVCache()
        with torch.no_grad():
            steps = [mha(x[:, :3], kv_cache=cache)] + [mha(x[:, i : i + 1], kv_cache=cache) for i in range(3, 9)]
            close(torch.cat(steps, dim=1), mha(x))


def test_a_model_with_alibi_reads_past_its_training_length():
    """No parameter depends on the length: the weights of an n_ctx=8 model run at 32 positions, and the
    first 8 logits are those of the short model (causal: later tokens change nothing before them)."""
    short = tl.GPT2(tl.GPT2Config(vocab_size=11, n_ctx=8, d_model=D_MODEL, n_layers=2, n_heads=N_HEADS,
                                  positional="alibi")).eval()
    long = tl.GPT2(tl.GPT2Config(vocab_size=11, n_ctx=32, d_model=D_MODEL, n_layers=2, n_heads=N_HEADS,
                                 positional="alibi")).eval()
    long.load_state_dict(short.state_dict())  # strict: the same keys, no position table
    x = torch.randint(0, 11, (2, 32))
    with torch.no_grad():
        close(long(x)[:, :8], short(x[:, :8]))
    none = tl.GPT2(tl.GPT2Config(vocab_size=11, n_ctx=8, d_model=D_MODEL, n_layers=2, n_heads=N_HEADS,
                                 positional="none"))
    assert short.num_parameters() == none.num_parameters()  # ALiBi learns nothing
    assert not any("slopes" in key for key in short.state_dict())


def test_generation_with_alibi_uses_the_cache_correctly():
    torch.manual_seed(0)
    model = tl.GPT2(tl.GPT2Config(vocab_size=11, n_ctx=32, d_model=D_MODEL, n_layers=2, n_heads=N_HEADS,
                                  positional="alibi", use_sdpa=True)).eval()
    prompt = torch.randint(0, 11, (2, 5))
    cached = tl.generate(model, prompt, 12, do_sample=False)
    recomputed = tl.generate(model, prompt, 12, do_sample=False, use_cache=False)
    assert torch.equal(cached, recomputed)


def test_forward_leaves_the_slopes_unchanged():
    explicit, fast = pair("causal")
    for mha in (explicit, fast):
        before = snapshot(mha)
        mha(torch.randn(2, 5, D_MODEL))
        assert_unchanged(mha, before)


def test_alibi_with_the_wrong_number_of_heads_is_refused():
    with pytest.raises(ValueError, match=r"ALiBi has one slope per head: built for n_heads=4, used with n_heads=8"):
        tl.MultiHeadAttention(D_MODEL, 8, positions=tl.ALiBi(4))


@pytest.mark.parametrize("n_heads", [0, -2, 2.5, True])
def test_alibi_slopes_need_a_positive_number_of_heads(n_heads):
    with pytest.raises((TypeError, ValueError), match="n_heads"):
        tl.ALiBi(n_heads)


def test_calling_a_scheme_on_a_tensor_says_where_it_acts():
    with pytest.raises(TypeError, match=r"ALiBi is not called on tensors: it acts inside attention"):
        tl.ALiBi(4)(torch.zeros(2, 4, 5, 8))
