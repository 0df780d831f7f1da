"""layers.normalization against nn.LayerNorm and nn.RMSNorm."""

import pytest
import torch
from torch import nn

import transformer_lib as tl

from .conftest import close


def randomise(*modules):
    """Give every norm the same random gain and bias, so the comparison covers them too."""
    torch.manual_seed(1)
    gain, bias = torch.randn(modules[0].weight.shape), torch.randn(modules[0].weight.shape)
    with torch.no_grad():
        for m in modules:
            m.weight.copy_(gain)
            if getattr(m, "bias", None) is not None:
                m.bias.copy_(bias)


@pytest.mark.parametrize("eps", [1e-5, 1e-12, 0.1])
def test_layernorm_matches_torch(eps):
    ours, ref = tl.LayerNorm(48, eps=eps), nn.LayerNorm(48, eps=eps)
    randomise(ours, ref)
    x = torch.randn(3, 7, 48) * 5 + 2
    close(ours(x), ref(x))


def test_layernorm_eps_is_inside_the_square_root():
    # nearly constant features: var ~ 1e-6, so where eps goes decides the answer
    x = 1.0 + 1e-3 * torch.randn(2, 16)
    close(tl.LayerNorm(16, eps=1e-2)(x), nn.LayerNorm(16, eps=1e-2)(x))


def test_layernorm_without_bias_matches_torch():
    ours, ref = tl.LayerNorm(32, bias=False), nn.LayerNorm(32, bias=False)
    randomise(ours, ref)
    x = torch.randn(4, 32)
    close(ours(x), ref(x))
    assert ours.bias is None and len(list(ours.parameters())) == 1


@pytest.mark.parametrize("eps", [1e-6, 1e-2])
def test_rmsnorm_matches_torch(eps):
    ours, ref = tl.RMSNorm(48, eps=eps), nn.RMSNorm(48, eps=eps)
    randomise(ours, ref)
    x = torch.randn(3, 7, 48) * 3 + 1
    close(ours(x), ref(x))


def test_rmsnorm_does_not_centre():
    x = torch.randn(4, 32) + 10
    out = tl.RMSNorm(32)(x)
    assert out.mean() > 0.9  # mean preserved in direction, only rescaled
    close(out.pow(2).mean(-1), torch.ones(4), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_norms_keep_float32_statistics_in_low_precision(dtype):
    # squares of 300 overflow float16: the statistics must be computed in float32
    x = torch.randn(4, 256) * 300 + 20
    for ours, ref in ((tl.LayerNorm(256), nn.LayerNorm(256)), (tl.RMSNorm(256), nn.RMSNorm(256, eps=1e-6))):
        out = ours.to(dtype)(x.to(dtype))
        assert out.dtype == dtype
        close(out.float(), ref(x), atol=0.05, rtol=0.02)


def test_norm_errors():
    with pytest.raises(ValueError, match=r"x must have last dimension d_model=16, got shape \(2, 8\)"):
        tl.LayerNorm(16)(torch.randn(2, 8))
    with pytest.raises(ValueError, match=r"eps must be a number > 0, got 0"):
        tl.RMSNorm(16, eps=0)
    with pytest.raises(ValueError, match=r"norm must be one of \['layernorm', 'rmsnorm'\], got 'batchnorm'"):
        tl.layers.make_norm("batchnorm", 16)


@pytest.mark.parametrize("make", [lambda: tl.LayerNorm(16), lambda: tl.LayerNorm(16, bias=False), lambda: tl.RMSNorm(16)])
def test_fused_norm_matches_the_written_out_one(make):
    norm = make()
    with torch.no_grad():
        for p in norm.parameters():
            p.uniform_(0.5, 1.5)
    x = (3 * torch.randn(2, 5, 16) + 1).requires_grad_()
    explicit = norm(x)
    (g_explicit,) = torch.autograd.grad(explicit.square().sum(), x)
    norm.fused = True
    fused = norm(x)
    (g_fused,) = torch.autograd.grad(fused.square().sum(), x)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g_fused, g_explicit, atol=1e-4, rtol=1e-4)
