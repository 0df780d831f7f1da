"""models.encoder_decoder: the Vaswani et al. Transformer."""

import pytest
import torch

import transformer_lib as tl

from .conftest import assert_unchanged, close, snapshot


def tiny(**overrides) -> tl.EncoderDecoder:
    settings = dict(vocab_size=30, src_vocab_size=40, n_ctx=20, d_model=32, n_layers=2, n_decoder_layers=3, n_heads=4, d_ff=64)
    return tl.EncoderDecoder(tl.EncoderDecoderConfig(**{**settings, **overrides})).eval()


def test_shapes_and_structure():
    model = tiny()
    src, tgt = torch.randint(0, 40, (2, 9)), torch.randint(0, 30, (2, 6))
    assert model(src, tgt).shape == (2, 6, 30)
    assert len(model.encoder) == 2 and len(model.decoder) == 3
    assert model.lm_head.weight is model.tgt_embed.token_embedding.weight
    assert model.decoder[0].cross_attn.kind == "cross" and model.decoder[0].self_attn.kind == "causal"


def test_embeddings_are_scaled_by_sqrt_d_model_plus_sinusoids():
    model = tiny()
    ids = torch.randint(0, 40, (2, 7))
    expected = model.src_embed.token_embedding.weight[ids] * 32**0.5 + tl.sinusoidal_encoding(20, 32)[:7]
    close(model.src_embed(ids, "src_ids"), expected)


@pytest.mark.slow
def test_loss_is_teacher_forced_cross_entropy_and_trains_with_the_default_loss_fn():
    model = tiny(dropout=0.0)
    src, tgt = torch.randint(0, 40, (3, 9)), torch.randint(0, 30, (3, 7))
    src_mask = torch.ones(3, 9, dtype=torch.bool)
    src_mask[0, 6:] = False
    targets = tgt[:, 1:].clone()
    targets[1, -2:] = tl.IGNORE_INDEX
    logits = model(src, tgt[:, :-1], src_attention_mask=src_mask)
    expected = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, ignore_index=tl.IGNORE_INDEX)
    close(model.loss(src, tgt[:, :-1], targets, src_mask), expected)

    # tl.train's default loss_fn calls model.loss(*batch): copy the source to the target
    def batches():
        g = torch.Generator().manual_seed(0)
        while True:
            s = torch.randint(3, 30, (16, 6), generator=g)
            t = torch.cat([torch.full((16, 1), 1), s], dim=1)  # BOS = 1
            yield s, t[:, :-1], t[:, 1:]

    it = batches()
    config = tl.TrainConfig(max_steps=100, lr=1e-2, warmup_steps=5, eval_interval=100, eval_steps=2, progress=False, device="cpu")
    state = tl.train(model, lambda: next(it), lambda: next(it), config)
    assert state.history[-1]["val_loss"] < 0.5 * state.history[0]["val_loss"]  # ln 30 = 3.4 -> about 0.7


def test_decoder_is_causal_and_reads_the_whole_source():
    model = tiny()
    src, tgt = torch.randint(0, 40, (1, 9)), torch.randint(0, 30, (1, 6))
    base = model(src, tgt)
    tgt2 = tgt.clone()
    tgt2[0, 4] = (tgt[0, 4] + 1) % 30
    close(model(src, tgt2)[:, :4], base[:, :4], atol=0, rtol=0)
    src2 = src.clone()
    src2[0, -1] = (src[0, -1] + 1) % 40
    assert not torch.allclose(model(src2, tgt)[:, 0], base[:, 0])  # even the first target sees the last source


def test_source_padding_never_changes_the_outputs():
    model = tiny()
    src, tgt = torch.randint(0, 40, (2, 9)), torch.randint(0, 30, (2, 6))
    keep = torch.tensor([[1] * 9, [1] * 5 + [0] * 4])
    other = torch.where(keep.bool(), src, torch.randint(0, 40, (2, 9)))
    close(model(src, tgt, keep), model(other, tgt, keep))
    close(model(src, tgt, keep)[1], model(src[1:2, :5], tgt[1:2])[0])


def test_shared_embeddings_and_pre_norm():
    model = tiny(src_vocab_size=30, norm_position="pre")  # one vocabulary: shared by default
    assert model.src_embed.token_embedding is model.tgt_embed.token_embedding
    assert model.lm_head.weight is model.src_embed.token_embedding.weight
    separate = tiny(src_vocab_size=30, share_embeddings=False, norm_position="pre")
    assert separate.num_parameters() - model.num_parameters() == 30 * 32
    assert tiny().src_embed.token_embedding is not tiny().tgt_embed.token_embedding  # two vocabularies
    assert isinstance(model.encoder_norm, tl.LayerNorm) and isinstance(model.decoder_norm, tl.LayerNorm)


@pytest.mark.slow
def test_greedy_generate_equals_argmax_loop():
    model = tiny()
    src = torch.randint(0, 40, (3, 9))
    out = model.generate(src, bos_token_id=1, max_new_tokens=6)
    tgt = torch.ones(3, 1, dtype=torch.long)
    for _ in range(6):
        tgt = torch.cat([tgt, model(src, tgt)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, tgt)


@pytest.mark.slow
def test_generate_is_deterministic_even_in_training_mode():
    model = tiny(dropout=0.3).train()
    src = torch.randint(0, 40, (2, 9))
    outs = {tuple(model.generate(src, 1, 8).flatten().tolist()) for _ in range(4)}
    assert len(outs) == 1 and model.training


def test_generate_stops_at_eos():
    model = tiny()
    src = torch.randint(0, 40, (4, 9))
    free = model.generate(src, bos_token_id=1, max_new_tokens=6)
    eos = int(free[0, 2])  # the token row 0 emits second
    out = model.generate(src, bos_token_id=1, max_new_tokens=6, eos_token_id=eos)
    assert (out[0, 2:] == eos).all()


def test_forward_mutates_nothing():
    model = tiny(dropout=0.2).train()
    before = snapshot(model)
    model(torch.randint(0, 40, (2, 9)), torch.randint(0, 30, (2, 6)), torch.ones(2, 9, dtype=torch.bool))
    assert_unchanged(model, before)


def test_errors():
    model = tiny()
    with pytest.raises(ValueError, match=r"src_ids contains token id 40, outside the vocabulary \[0, 39\]"):
        model(torch.full((1, 3), 40), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tgt_ids may have at most n_ctx=20"):
        model(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 21, dtype=torch.long))
    with pytest.raises(ValueError, match="same batch size"):
        model(torch.zeros(2, 3, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"share_embeddings needs src_vocab_size == vocab_size"):
        tl.EncoderDecoderConfig(vocab_size=10, src_vocab_size=12, share_embeddings=True)
    with pytest.raises(ValueError, match=r"max_new_tokens must be in \[1, 19\], got 25"):
        model.generate(torch.zeros(1, 3, dtype=torch.long), 1, 25)
