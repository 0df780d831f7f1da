"""generation: sampling filters, KV cache equivalence, context cropping, errors."""

import numpy as np
import pytest
import torch

import transformer_lib as tl

from .conftest import LLAMA_STYLE, close, tiny_gpt2


@pytest.mark.parametrize("overrides", [{}, LLAMA_STYLE, {"positional": "sinusoidal", "use_sdpa": True}])
@pytest.mark.parametrize("do_sample", [False, True])
def test_kv_cache_generation_equals_full_recomputation(overrides, do_sample):
    model = tiny_gpt2(**overrides)
    prompt = torch.randint(0, 97, (2, 5))
    kwargs = dict(do_sample=do_sample, temperature=0.8, top_k=20)
    # 40 new tokens: well past n_ctx=24, so the cropping path is exercised too
    cached = tl.generate(model, prompt, 40, use_cache=True, generator=torch.Generator().manual_seed(1), **kwargs)
    full = tl.generate(model, prompt, 40, use_cache=False, generator=torch.Generator().manual_seed(1), **kwargs)
    assert cached.shape == (2, 45)
    assert torch.equal(cached, full)
    assert torch.equal(cached[:, :5], prompt)


def test_cached_logits_equal_full_logits():
    model = tiny_gpt2(**LLAMA_STYLE)
    ids = torch.randint(0, 97, (2, 12))
    cache = model.new_kv_cache()
    steps = [model(ids[:, :7], kv_cache=cache)] + [model(ids[:, i : i + 1], kv_cache=cache) for i in range(7, 12)]
    close(torch.cat(steps, dim=1), model(ids))
    assert len(cache) == 12


def test_greedy_is_argmax_of_the_model():
    model = tiny_gpt2()
    prompt = torch.randint(0, 97, (1, 4))
    out = tl.generate(model, prompt, 3, do_sample=False)
    ids = prompt
    for _ in range(3):
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, ids)


def test_generate_crops_to_the_context_window():
    model = tiny_gpt2()  # n_ctx = 24
    long_prompt = torch.randint(0, 97, (1, 30))
    out = tl.generate(model, long_prompt, 1, do_sample=False)
    assert out[0, -1] == model(long_prompt[:, -24:])[0, -1].argmax()


def test_temperature_sharpens_and_flattens():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    base = tl.next_token_probs(logits)
    close(base, logits.softmax(-1))
    assert tl.next_token_probs(logits, temperature=0.5)[0, 0] > base[0, 0] > tl.next_token_probs(logits, temperature=2.0)[0, 0]


def test_top_k_keeps_exactly_k():
    logits = torch.randn(3, 50)
    probs = tl.next_token_probs(logits, top_k=5)
    assert ((probs > 0).sum(-1) == 5).all()
    kept = probs.topk(5).indices.sort().values
    assert torch.equal(kept, logits.topk(5).indices.sort().values)
    close(probs.sum(-1), torch.ones(3))
    close(tl.next_token_probs(logits, top_k=500), logits.softmax(-1))  # k > vocab keeps all


def test_top_p_keeps_the_smallest_nucleus():
    probs_in = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs_in.log()
    close(tl.next_token_probs(logits, top_p=0.5), torch.tensor([[1.0, 0, 0, 0]]))  # 0.5 alone reaches 0.5
    close(tl.next_token_probs(logits, top_p=0.6), torch.tensor([[0.625, 0.375, 0, 0]]))
    close(tl.next_token_probs(logits, top_p=0.95), torch.tensor([[0.5, 0.3, 0.15, 0]]) / 0.95)
    close(tl.next_token_probs(logits, top_p=1.0), probs_in)
    close(tl.next_token_probs(logits, top_p=0.01), torch.tensor([[1.0, 0, 0, 0]]))  # the top token always survives


def test_sampling_follows_the_distribution():
    logits = torch.tensor([[0.0, 1.0, 2.0]]).repeat(20000, 1)
    draws = tl.sample_next_token(logits, generator=torch.Generator().manual_seed(0))[:, 0]
    freq = torch.bincount(draws, minlength=3).float() / len(draws)
    close(freq, logits[0].softmax(-1), atol=0.015, rtol=0)


def test_sampling_errors():
    model, prompt = tiny_gpt2(), torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"temperature must be a number > 0, got 0"):
        tl.generate(model, prompt, 2, temperature=0)
    with pytest.raises(ValueError, match=r"temperature must be a number > 0, got -1.0"):
        tl.next_token_probs(torch.zeros(1, 5), temperature=-1.0)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\], got 0"):
        tl.generate(model, prompt, 2, top_p=0)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\], got 1.5"):
        tl.next_token_probs(torch.zeros(1, 5), top_p=1.5)
    with pytest.raises(ValueError, match=r"top_k must be in \[1, inf\], got 0"):
        tl.generate(model, prompt, 2, top_k=0)
    with pytest.raises(ValueError, match=r"input_ids contains token id 200"):
        tl.generate(model, torch.tensor([[1, 200]]), 2)
    with pytest.raises(ValueError, match=r"logits must have shape \(batch, vocab\), got \(5,\)"):
        tl.next_token_probs(torch.zeros(5))
    # NumPy numbers are numbers too
    probs = tl.next_token_probs(torch.tensor([[0.0, 1.0, 2.0]]), temperature=np.float32(0.7), top_k=np.int64(2))
    assert (probs > 0).sum() == 2
    with pytest.raises(ValueError, match=r"max_new_tokens must be in \[0, inf\], got -1"):
        tl.generate(model, prompt, -1)


def test_generate_restores_training_mode():
    model = tiny_gpt2().train()
    tl.generate(model, torch.zeros(1, 2, dtype=torch.long), 2)
    assert model.training
