"""layers.block against nn.TransformerEncoderLayer / nn.TransformerDecoderLayer with copied weights."""

import pytest
import torch
from torch import nn

import transformer_lib as tl

from .conftest import close

D, H, FF = 32, 4, 64


def copy_attention(ours: tl.MultiHeadAttention, ref: nn.MultiheadAttention):
    ref.in_proj_weight.copy_(torch.cat([ours.W_Q.weight, ours.W_K.weight, ours.W_V.weight]))
    ref.in_proj_bias.copy_(torch.cat([ours.W_Q.bias, ours.W_K.bias, ours.W_V.bias]))
    ref.out_proj.weight.copy_(ours.W_O.weight)
    ref.out_proj.bias.copy_(ours.W_O.bias)


def copy_common(ours, ref):
    ref.linear1.weight.copy_(ours.ffn.W_in.weight)
    ref.linear1.bias.copy_(ours.ffn.W_in.bias)
    ref.linear2.weight.copy_(ours.ffn.W_out.weight)
    ref.linear2.bias.copy_(ours.ffn.W_out.bias)
    for i in (1, 2, 3):
        if hasattr(ours, f"norm_{i}"):
            mine, theirs = getattr(ours, f"norm_{i}"), getattr(ref, f"norm{i}")
            mine.weight.normal_()  # non-trivial gains and biases, so a swapped norm would show
            mine.bias.normal_()
            theirs.weight.copy_(mine.weight)
            theirs.bias.copy_(mine.bias)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
@pytest.mark.parametrize("attn_kind", ["bidirectional", "causal"])
def test_block_matches_torch_encoder_layer(norm_position, attn_kind):
    ours = tl.TransformerBlock(D, H, FF, attn_kind=attn_kind, norm_position=norm_position, ffn="relu").eval()
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_position == "pre").eval()
    with torch.no_grad():
        copy_attention(ours.attn, ref.self_attn)
        copy_common(ours, ref)
    x = torch.randn(2, 7, D)
    keep = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    causal = attn_kind == "causal"
    expected = ref(
        x,
        src_mask=torch.ones(7, 7, dtype=torch.bool).triu(1) if causal else None,  # torch: True = hidden
        src_key_padding_mask=keep == 0,
        is_causal=causal,
    )
    actual = ours(x, mask=tl.padding_mask(keep))
    # torch's fast path zeroes padded query rows in some versions: compare real positions
    close(actual[keep.bool()], expected[keep.bool()])


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_decoder_block_matches_torch_decoder_layer(norm_position):
    ours = tl.DecoderBlock(D, H, FF, norm_position=norm_position, ffn="relu").eval()
    ref = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_position == "pre").eval()
    with torch.no_grad():
        copy_attention(ours.self_attn, ref.self_attn)
        copy_attention(ours.cross_attn, ref.multihead_attn)
        copy_common(ours, ref)
    x, memory = torch.randn(2, 6, D), torch.randn(2, 9, D)
    src_keep = torch.tensor([[1] * 9, [1] * 4 + [0] * 5])
    expected = ref(
        x,
        memory,
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(6),
        memory_key_padding_mask=src_keep == 0,
        tgt_is_causal=True,
    )
    close(ours(x, memory, memory_mask=tl.padding_mask(src_keep)), expected)


def test_pre_norm_and_post_norm_differ():
    torch.manual_seed(0)
    pre = tl.TransformerBlock(D, H, norm_position="pre")
    post = tl.TransformerBlock(D, H, norm_position="post")
    post.load_state_dict(pre.state_dict())
    x = torch.randn(1, 4, D)
    assert not torch.allclose(pre(x), post(x))
    close(post(x).mean(-1), torch.zeros(1, 4), atol=1e-5, rtol=0)  # post-norm output is normalised


def test_block_with_rmsnorm_rope_swiglu():
    rope = tl.RotaryEmbedding(D // H, 16)
    block = tl.TransformerBlock(D, H, norm="rmsnorm", ffn="swiglu", bias=False, positions=rope, ffn_multiple_of=16)
    assert isinstance(block.norm_1, tl.RMSNorm) and isinstance(block.ffn, tl.GatedFeedForward)
    assert not any(name.endswith("bias") for name, _ in block.named_parameters())
    assert block(torch.randn(2, 5, D)).shape == (2, 5, D)


def test_block_errors():
    with pytest.raises(ValueError, match=r"norm_position must be one of \['post', 'pre'\], got 'middle'"):
        tl.TransformerBlock(D, H, norm_position="middle")
    with pytest.raises(ValueError, match=r"attn_kind must be one of"):
        tl.TransformerBlock(D, H, attn_kind="cross")
