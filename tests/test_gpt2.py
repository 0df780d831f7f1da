"""models.gpt2: equivalence with Hugging Face GPT-2, causality, padding, tying, init, errors."""

import math

import pytest
import torch
import transformers

import transformer_lib as tl

from .conftest import LLAMA_STYLE, assert_unchanged, close, snapshot, tiny_gpt2


def tiny_hf_gpt2(**overrides):
    settings = dict(
        vocab_size=97, n_positions=24, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    config = transformers.GPT2Config(**{**settings, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # HF initialises norms to 1/0: randomise them so a swapped norm shows
        for name, p in model.named_parameters():
            if "ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("activation", ["gelu_new", "relu"])
def test_logits_and_loss_match_hugging_face(activation):
    hf = tiny_hf_gpt2(activation_function=activation)
    ours = tl.gpt2_from_hf(hf)
    ids = torch.randint(0, 97, (3, 20))
    with torch.no_grad():
        ref = hf(ids, labels=ids)
        logits = ours(ids)
    close(logits, ref.logits)
    # HF shifts inside; we pass the shifted targets explicitly
    close(tl.causal_lm_loss(logits[:, :-1], ids[:, 1:]), ref.loss)
    close(ours.loss(ids[:, :-1], ids[:, 1:]), ref.loss)
    assert ours.lm_head.weight is ours.token_embedding.weight


def test_padded_batch_matches_hugging_face():
    hf = tiny_hf_gpt2()
    ours = tl.gpt2_from_hf(hf)
    ids = torch.randint(0, 97, (2, 12))
    keep = torch.ones(2, 12, dtype=torch.long)
    keep[1, 8:] = 0  # right padding
    with torch.no_grad():
        ref = hf(ids, attention_mask=keep).logits
        logits = ours(ids, attention_mask=keep)
    close(logits[keep.bool()], ref[keep.bool()])


def test_converted_model_uses_fast_path_identically():
    ours = tl.gpt2_from_hf(tiny_hf_gpt2())
    fast = tl.GPT2(tl.GPT2Config(**{**ours.config.to_dict(), "use_sdpa": True})).eval()
    fast.load_state_dict(ours.state_dict())
    ids = torch.randint(0, 97, (2, 16))
    close(fast(ids), ours(ids))


@pytest.mark.parametrize("overrides", [{}, LLAMA_STYLE, {"positional": "sinusoidal", "norm_position": "post"}])
def test_changing_future_tokens_never_changes_earlier_outputs(overrides):
    model = tiny_gpt2(**overrides)
    ids = torch.randint(0, 97, (2, 16))
    changed = ids.clone()
    changed[:, 10:] = torch.randint(0, 97, (2, 6))
    a, b = model(ids), model(changed)
    close(a[:, :10], b[:, :10], atol=0, rtol=0)  # bit-identical
    assert not torch.allclose(a[:, 10:], b[:, 10:])


@pytest.mark.parametrize("overrides", [{}, LLAMA_STYLE])
def test_padded_positions_never_change_the_other_outputs(overrides):
    model = tiny_gpt2(**overrides)
    keep = torch.tensor([[1] * 12, [1] * 7 + [0] * 5, [0] * 4 + [1] * 8])  # right and left padding
    ids = torch.randint(0, 97, (3, 12))
    other = torch.where(keep.bool(), ids, torch.randint(0, 97, (3, 12)))  # new tokens under the padding
    a, b = model(ids, attention_mask=keep), model(other, attention_mask=keep)
    close(a[keep.bool()], b[keep.bool()])
    # and each row equals that sequence run alone (right padding: same positions)
    close(a[1, :7], model(ids[1:2, :7])[0])
    close(a[0], model(ids[0:1])[0])
    assert not a.isnan().any()


def test_rope_model_is_invariant_to_left_padding():
    """With relative positions only, a left-padded prompt gives the unpadded outputs."""
    model = tiny_gpt2(**LLAMA_STYLE)
    ids = torch.randint(0, 97, (1, 8))
    padded = torch.cat([torch.zeros(1, 4, dtype=torch.long), ids], dim=1)
    keep = torch.tensor([[0] * 4 + [1] * 8])
    close(model(padded, attention_mask=keep)[:, 4:], model(ids), atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_forward_mutates_no_parameter_or_buffer():
    for overrides in ({}, LLAMA_STYLE, {"positional": "sinusoidal"}):
        model = tiny_gpt2(dropout=0.1, **overrides).train()
        before = snapshot(model)
        ids = torch.randint(0, 97, (2, 10))
        model(ids, attention_mask=torch.ones(2, 10, dtype=torch.long))
        model.eval()
        cache = model.new_kv_cache()
        model(ids[:, :5], kv_cache=cache)
        model(ids[:, 5:6], kv_cache=cache)
        assert_unchanged(model, before)


def test_tied_weights_are_one_tensor_and_save_vocab_times_d_model():
    tied, untied = tiny_gpt2(tie_weights=True), tiny_gpt2(tie_weights=False)
    assert tied.lm_head.weight is tied.token_embedding.weight
    assert untied.lm_head.weight is not untied.token_embedding.weight
    assert untied.num_parameters() - tied.num_parameters() == 97 * 32
    # still one tensor after a device/dtype move and a state_dict round trip
    moved = tied.to(torch.float64)
    assert moved.lm_head.weight is moved.token_embedding.weight
    fresh = tiny_gpt2(tie_weights=True)
    fresh.load_state_dict(tied.state_dict())
    assert fresh.lm_head.weight is fresh.token_embedding.weight
    # a gradient step through the head moves the embedding too
    tied = tied.float().train()
    tied(torch.randint(0, 97, (1, 5))).sum().backward()
    assert tied.token_embedding.weight.grad is tied.lm_head.weight.grad


@pytest.mark.slow
def test_parameter_count_of_gpt2_small():
    model = tl.GPT2(tl.GPT2Config())
    hf_count = sum(p.numel() for p in transformers.GPT2LMHeadModel(transformers.GPT2Config()).parameters())
    assert model.num_parameters() == hf_count == 124_439_808  # the published "124M"
    assert model.num_parameters(exclude_embeddings=True) == 124_439_808 - 50257 * 768 - 1024 * 768
    untied = tl.GPT2(tl.GPT2Config(tie_weights=False, n_layers=1))
    assert untied.num_parameters(exclude_embeddings=True) == untied.num_parameters() - 50257 * 768 - 1024 * 768


def test_gpt2_initialisation():
    model = tl.GPT2(tl.GPT2Config(vocab_size=1000, n_ctx=64, d_model=256, n_layers=8, n_heads=8))
    std = lambda t: t.detach().std().item()  # noqa: E731
    assert abs(std(model.token_embedding.weight) - 0.02) < 0.001
    assert abs(std(model.blocks[3].attn.W_Q.weight) - 0.02) < 0.001
    scaled = 0.02 / math.sqrt(2 * 8)
    assert abs(std(model.blocks[3].attn.W_O.weight) - scaled) < 0.0005
    assert abs(std(model.blocks[3].ffn.W_out.weight) - scaled) < 0.0005
    assert (model.blocks[0].attn.W_Q.bias == 0).all() and (model.blocks[0].norm_1.weight == 1).all()


def test_llama_style_decoder_is_built_from_the_same_parts():
    model = tiny_gpt2(**LLAMA_STYLE)
    assert model.position_embedding is None and isinstance(model.rope, tl.RotaryEmbedding)
    assert isinstance(model.norm_f, tl.RMSNorm) and isinstance(model.blocks[0].ffn, tl.GatedFeedForward)
    assert model.blocks[0].attn.positions is model.rope is model.positions
    assert not any(n.endswith("bias") for n, _ in model.named_parameters())
    assert model.lm_head.weight is not model.token_embedding.weight


def test_loss_at_initialisation_is_ln_vocab():
    model = tl.GPT2(tl.GPT2Config(vocab_size=500, n_ctx=32, d_model=64, n_layers=2, n_heads=4)).eval()
    ids = torch.randint(0, 500, (8, 32))
    loss = model.loss(ids[:, :-1], ids[:, 1:])
    assert abs(loss.item() - math.log(500)) < 0.05


# ---- errors -----------------------------------------------------------------------------------


def test_sequence_longer_than_context():
    model = tiny_gpt2()
    with pytest.raises(ValueError, match=r"sequence length 25 is longer than the context: input_ids may have at most n_ctx=24"):
        model(torch.zeros(1, 25, dtype=torch.long))
    cache = model.new_kv_cache()
    model(torch.zeros(1, 20, dtype=torch.long), kv_cache=cache)
    with pytest.raises(ValueError, match=r"sequence length 25 \(20 cached \+ 5 new\)"):
        model(torch.zeros(1, 5, dtype=torch.long), kv_cache=cache)


def test_token_id_outside_vocabulary():
    model = tiny_gpt2()
    with pytest.raises(ValueError, match=r"input_ids contains token id 97, outside the vocabulary \[0, 96\]"):
        model(torch.tensor([[1, 2, 97]]))
    with pytest.raises(ValueError, match=r"token id -1, outside the vocabulary"):
        model(torch.tensor([[1, -1]]))
    with pytest.raises(TypeError, match=r"input_ids must hold integer token ids"):
        model(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, seq\)"):
        model(torch.tensor([1, 2]))


def test_attention_mask_errors():
    model = tiny_gpt2()
    ids = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(batch, seq\) = \(2, 5\), got \(2, 4\)"):
        model(ids, attention_mask=torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match=r"attention_mask must be bool or integer"):
        model(ids, attention_mask=torch.ones(2, 5, dtype=torch.float))


def test_unsupported_hugging_face_variants_are_refused():
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        tl.gpt2_from_hf(tiny_hf_gpt2(scale_attn_by_inverse_layer_idx=True))
    with pytest.raises(ValueError, match="unsupported activation 'swish'"):
        tl.gpt2_from_hf(tiny_hf_gpt2(activation_function="swish"))


def test_token_id_dtype_must_be_long_or_int32():
    model = tiny_gpt2()
    close(model(torch.tensor([[1, 2, 3]], dtype=torch.int32)), model(torch.tensor([[1, 2, 3]])))
    with pytest.raises(TypeError, match=r"input_ids must hold integer token ids \(torch.long or torch.int32\), got dtype torch.uint8"):
        model(torch.tensor([[1, 2, 3]], dtype=torch.uint8))


def test_loss_errors():
    logits = torch.randn(2, 5, 97)
    with pytest.raises(TypeError, match=r"targets must hold integer token ids"):
        tl.causal_lm_loss(logits, torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"logits must be \(batch, seq, vocab\) and targets \(batch, seq\)"):
        tl.causal_lm_loss(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="no masked positions"):
        tl.masked_lm_loss(torch.randn(0, 97), torch.zeros(0, dtype=torch.long))


def test_config_errors():
    with pytest.raises(ValueError, match=r"d_model \(100\) must be divisible by n_heads \(12\)"):
        tl.GPT2Config(d_model=100)
    with pytest.raises(ValueError, match=r"positional='rope' .* d_model / n_heads must be even, got d_head=9"):
        tl.GPT2Config(d_model=36, n_heads=4, positional="rope")
    with pytest.raises(ValueError, match=r"n_layers must be in \[1, inf\], got 0"):
        tl.GPT2Config(n_layers=0)
    with pytest.raises(ValueError, match=r"positional must be one of"):
        tl.GPT2Config(positional="xpos")  # not registered
    with pytest.raises(TypeError, match=r"use_sdpa must be True or False, got str 'no'"):
        tl.GPT2Config(use_sdpa="no")
    with pytest.raises(ValueError, match=r"rope_base must be a number > 0, got 0"):
        tl.GPT2Config(rope_base=0)
    with pytest.raises(TypeError, match=r"dropout must be a float in \[0, 1\), got str"):
        tl.GPT2Config(dropout="0.1")
    with pytest.raises(TypeError, match=r"config must be a GPT2Config"):
        tl.GPT2({"d_model": 4})


@pytest.mark.offline
def test_from_pretrained_fails_clearly_offline():
    with pytest.raises(RuntimeError, match=r"could not fetch 'gpt2' from the Hugging Face Hub: it is not reachable"):
        tl.GPT2.from_pretrained("gpt2")


@pytest.mark.network
def test_from_pretrained_gpt2_matches_hugging_face():
    hf = transformers.GPT2LMHeadModel.from_pretrained("gpt2").eval()
    ours = tl.GPT2.from_pretrained("gpt2")
    ids = torch.tensor([[32, 890, 640, 2084]])  # "A long time ago"
    with torch.no_grad():
        close(ours(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)


# ---- vocabulary padding (chapter 11) and the token-id check in the hot path --------------------


def padded_copy(model: tl.GPT2, multiple: int = 64) -> tl.GPT2:
    """``model`` with its embedding and head padded to a multiple of ``multiple`` rows (random padding)."""
    padded = tl.GPT2(tl.GPT2Config(**{**model.config.to_dict(), "vocab_multiple_of": multiple})).eval()
    state = dict(model.state_dict())
    V = model.config.vocab_size
    for name in ("token_embedding.weight", "lm_head.weight"):
        big = padded.state_dict()[name].clone()  # random rows beyond V: they must not matter
        big[:V] = state[name]
        state[name] = big
    padded.load_state_dict(state)
    return padded


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [{}, {"tie_weights": False}])
def test_padded_vocabulary_changes_nothing_but_the_table_size(overrides):
    model = tiny_gpt2(**overrides)
    padded = padded_copy(model)
    assert padded.config.padded_vocab_size == 128 and padded.lm_head.weight.shape == (128, 32)
    assert (padded.lm_head.weight is padded.token_embedding.weight) == model.config.tie_weights
    ids = torch.randint(0, 97, (2, 16))
    logits = padded(ids)
    assert logits.shape == (2, 16, 97)  # the real vocabulary: pad logits are cut off
    close(logits, model(ids))
    close(padded.loss(ids[:, :-1], ids[:, 1:]), model.loss(ids[:, :-1], ids[:, 1:]))
    prompt = ids[:, :3]
    assert torch.equal(tl.generate(padded, prompt, 12, do_sample=False), tl.generate(model, prompt, 12, do_sample=False))
    sampled = [tl.generate(m, prompt, 12, generator=torch.Generator().manual_seed(0)) for m in (padded, model)]
    assert torch.equal(*sampled)


def test_padded_conversion_from_hugging_face_matches():
    hf = tiny_hf_gpt2()
    ours = tl.gpt2_from_hf(hf, vocab_multiple_of=64)
    assert ours.token_embedding.weight.shape == (128, 32) and ours.config.vocab_size == 97
    ids = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        ref = hf(ids, labels=ids)
        logits = ours(ids)
    close(logits, ref.logits)
    close(ours.loss(ids[:, :-1], ids[:, 1:]), ref.loss)
    assert ours.lm_head.weight is ours.token_embedding.weight


def test_padded_rows_are_not_token_ids():
    model = tiny_gpt2(vocab_multiple_of=64)
    with pytest.raises(ValueError, match=r"input_ids contains token id 100, outside the vocabulary \[0, 96\]"):
        model(torch.tensor([[1, 100]]))
    with pytest.raises(ValueError, match=r"vocab_multiple_of must be in \[1, inf\], got 0"):
        tl.GPT2Config(vocab_multiple_of=0)


def test_token_id_check_in_the_hot_path():
    from transformer_lib._checks import check_token_ids, hot_path

    model = tiny_gpt2()
    with hot_path():  # on the CPU reading the ids back is free: the clear error stays
        with pytest.raises(ValueError, match=r"input_ids contains token id 97, outside the vocabulary"):
            model(torch.tensor([[1, 97]]))
    # on an accelerator the hot path must not read values back; "meta" tensors have no values to
    # read, so reading them fails: outside the hot path it does, inside it does not
    meta = torch.zeros(2, 3, dtype=torch.long, device="meta")
    with pytest.raises(RuntimeError, match=r"item\(\) cannot be called on meta tensors"):
        check_token_ids("input_ids", meta, 97)
    with hot_path():
        check_token_ids("input_ids", meta, 97)


@pytest.mark.slow
def test_compiled_model_has_one_graph_and_still_refuses_bad_ids():
    import torch._dynamo

    torch._dynamo.reset()
    model = tiny_gpt2(use_sdpa=True)
    ids = torch.randint(0, 97, (2, 16))
    explanation = torch._dynamo.explain(model.loss)(ids[:, :-1], ids[:, 1:])
    assert explanation.graph_break_count == 0, [str(b.reason)[:200] for b in explanation.break_reasons]
    compiled = torch.compile(model, backend="eager")  # tracing only: fast, and enough to run the assert
    with pytest.raises(RuntimeError, match=r"input_ids contains a token id outside the vocabulary \[0, 96\]"):
        compiled(torch.tensor([[1, 97]]))
    torch._dynamo.reset()
