"""generation: sampling filters, KV cache equivalence, context cropping, errors."""

import numpy as np
import pytest
import torch

import transformer_lib as tl

from .conftest import LLAMA_STYLE, close, tiny_gpt2


@pytest.mark.slow
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


@pytest.mark.slow
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


# ---- beam search (chapter 9) ----------------------------------------------------------------


def _hf_tiny_gpt2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=23, n_positions=32, n_embd=16, n_layer=2, n_head=2,
                                     bos_token_id=1, eos_token_id=3, pad_token_id=3)
    hf = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        hf.transformer.wte.weight[3] *= 4  # EOS (3) likelier, so that hypotheses end at different lengths
    return hf, tl.gpt2_from_hf(hf)


@pytest.mark.slow
@pytest.mark.parametrize("num_beams, length_penalty, early_stopping, eos", [
    (4, 1.0, False, 3), (3, 0.6, False, 3), (4, 0.0, True, 3), (5, -1.0, False, 3), (2, 2.0, False, None),
])
def test_beam_search_equals_hugging_face(num_beams, length_penalty, early_stopping, eos):
    hf, ours = _hf_tiny_gpt2()
    ended_early = 0
    for seed in range(8):
        prompt = torch.randint(0, 23, (3, 4), generator=torch.Generator().manual_seed(seed))
        hf_eos = {"eos_token_id": eos, "pad_token_id": 5}
        ref = hf.generate(prompt, attention_mask=torch.ones_like(prompt), num_beams=num_beams, do_sample=False,
                          max_new_tokens=12, length_penalty=length_penalty, early_stopping=early_stopping, **hf_eos)
        got = tl.generate(ours, prompt, 12, num_beams=num_beams, do_sample=False, length_penalty=length_penalty,
                          early_stopping=early_stopping, eos_token_id=eos, pad_token_id=5)
        assert torch.equal(got, ref), (seed, got, ref)
        ended_early += got.shape[1] < 16
    if eos is not None:
        assert ended_early, "no hypothesis ended at EOS: the EOS path was not exercised"


@pytest.mark.slow
def test_beam_search_with_enough_beams_is_exhaustive_search():
    """With vocab^(n-1) beams every prefix survives, so the result is the most probable sequence."""
    torch.manual_seed(0)
    model = tl.EncoderDecoder(tl.EncoderDecoderConfig(vocab_size=5, src_vocab_size=7, n_ctx=8, d_model=16,
                                                      n_layers=1, n_heads=2)).eval()
    src = torch.tensor([[1, 4, 2, 6], [5, 5, 0, 3]])
    out = model.generate(src, bos_token_id=0, max_new_tokens=3, num_beams=25, length_penalty=0.0)
    all_tails = torch.cartesian_prod(*[torch.arange(5)] * 3)  # (125, 3) every continuation
    for row in range(2):
        tgt = torch.cat([torch.zeros(125, 1, dtype=torch.long), all_tails], dim=1)
        logp = model(src[row : row + 1].expand(125, -1), tgt[:, :-1]).log_softmax(-1)
        total = logp.gather(-1, tgt[:, 1:, None]).squeeze(-1).sum(-1)
        assert torch.equal(out[row], tgt[total.argmax()])


@pytest.mark.slow
def test_one_beam_is_greedy():
    model = tiny_gpt2()
    prompt = torch.randint(0, 97, (2, 4), generator=torch.Generator().manual_seed(0))
    greedy = tl.generate(model, prompt, 6, do_sample=False)
    assert torch.equal(tl.beam_search(lambda ids: model(ids)[:, -1], prompt, 6, 1, vocab_size=97), greedy)
    torch.manual_seed(0)
    ed = tl.EncoderDecoder(tl.EncoderDecoderConfig(vocab_size=11, src_vocab_size=7, n_ctx=12, d_model=16,
                                                   n_layers=1, n_heads=2)).eval()
    src = torch.randint(0, 7, (3, 5), generator=torch.Generator().manual_seed(1))
    beams = ed.generate(src, 0, 6, num_beams=3)
    assert beams.shape == (3, 7) and (beams[:, 0] == 0).all()


def test_generate_refuses_models_that_are_not_decoders():
    from .conftest import tiny_bert
    prompt = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(TypeError, match=r"tl.generate needs a decoder-only language model .* got BERT\. "
                                        r"An encoder such as BERT .* fill in \[MASK\]s"):
        tl.generate(tiny_bert(), prompt, 2)
    ed = tl.EncoderDecoder(tl.EncoderDecoderConfig(vocab_size=11, src_vocab_size=7, n_ctx=12, d_model=16,
                                                   n_layers=1, n_heads=2))
    with pytest.raises(TypeError, match=r"got EncoderDecoder\. For the encoder-decoder use its own model.generate"):
        tl.generate(ed, prompt, 2)


def test_beam_search_errors():
    model, prompt = tiny_gpt2(), torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"beam search is deterministic: pass do_sample=False"):
        tl.generate(model, prompt, 2, num_beams=2)
    with pytest.raises(ValueError, match=r"3 tokens \+ max_new_tokens=30 > n_ctx=24"):
        tl.generate(model, prompt, 30, num_beams=2, do_sample=False)
    with pytest.raises(ValueError, match=r"num_beams must be in \[1, inf\], got 0"):
        tl.generate(model, prompt, 2, num_beams=0, do_sample=False)
    with pytest.raises(ValueError, match=r"eos_token_id must be in \[0, 96\], got 97"):
        tl.generate(model, prompt, 2, num_beams=2, do_sample=False, eos_token_id=97)
