"""models.bert: equivalence with Hugging Face BERT, masked-position prediction, padding, recipes."""

import pytest
import torch
import torch.nn.functional as F
import transformers

import transformer_lib as tl

from .conftest import assert_unchanged, close, snapshot, tiny_bert


def tiny_hf_bert(**overrides):
    return tiny_hf(transformers.BertForMaskedLM, **overrides)


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new"])
def test_logits_match_hugging_face(hidden_act):
    hf = tiny_hf_bert(hidden_act=hidden_act)
    ours = tl.bert_from_hf(hf)
    ids = torch.randint(0, 101, (3, 16))
    types = torch.cat([torch.zeros(3, 8, dtype=torch.long), torch.ones(3, 8, dtype=torch.long)], dim=1)
    keep = torch.ones(3, 16, dtype=torch.long)
    keep[1, 10:] = 0
    keep[2, 5:] = 0
    with torch.no_grad():
        ref = hf(ids, attention_mask=keep, token_type_ids=types).logits
        logits = ours(ids, attention_mask=keep, token_type_ids=types)
    close(logits[keep.bool()], ref[keep.bool()])
    assert ours.mlm_head.decoder.weight is ours.token_embedding.weight


def test_mlm_loss_matches_hugging_face():
    hf = tiny_hf_bert()
    ours = tl.bert_from_hf(hf)
    ids = torch.randint(0, 101, (2, 16))
    labels = torch.full_like(ids, tl.IGNORE_INDEX)
    labels[0, [2, 5]] = ids[0, [2, 5]]
    labels[1, 9] = ids[1, 9]
    with torch.no_grad():
        close(ours.mlm_loss(ids, labels), hf(ids, labels=labels).loss)


def test_predicts_only_the_masked_positions():
    model = tiny_bert()
    ids = torch.randint(0, 101, (2, 10))
    where = torch.zeros(2, 10, dtype=torch.bool)
    where[0, 3] = where[1, 7] = where[1, 8] = True
    few = model(ids, masked_positions=where)
    assert few.shape == (3, 101)
    close(few, model(ids)[where])


def test_padded_positions_never_change_the_other_outputs():
    model = tiny_bert()
    keep = torch.tensor([[1] * 10, [1] * 6 + [0] * 4])
    ids = torch.randint(0, 101, (2, 10))
    other = torch.where(keep.bool(), ids, torch.randint(0, 101, (2, 10)))
    a, b = model(ids, attention_mask=keep), model(other, attention_mask=keep)
    close(a[keep.bool()], b[keep.bool()])
    close(a[1, :6], model(ids[1:2, :6])[0])  # equals the unpadded sequence alone
    # bidirectional: without the mask the padding *would* leak into the real positions
    assert not torch.allclose(model(ids)[1, :6], model(other)[1, :6])


def test_every_position_sees_the_future():
    model = tiny_bert()
    ids = torch.randint(0, 101, (1, 10))
    changed = ids.clone()
    changed[0, 9] = (ids[0, 9] + 1) % 101
    assert not torch.allclose(model(ids)[0, 0], model(changed)[0, 0])


def test_cramming_scales_its_sinusoids_so_tokens_stay_distinguishable():
    def embedded(positional):
        torch.manual_seed(0)
        extra = {} if positional is None else {"positional": positional}
        config = tl.BERTConfig.cramming(vocab_size=66, n_ctx=16, d_model=64, n_layers=2, n_heads=4, **extra)
        model = tl.BERT(config)
        with torch.no_grad():  # two different tokens at the same position, after the embedding norm
            x = model.embedding_norm(model.token_embedding.weight[[10, 20]] + model.position_embedding(1, offset=1))
        return config, model, torch.nn.functional.cosine_similarity(x[0], x[1], dim=0)

    config, model, cosine = embedded(None)
    assert config.positional == "scaled_sinusoidal"
    assert model.position_embedding.scale in set(model.parameters())
    _, _, unscaled_cosine = embedded("sinusoidal")
    # unscaled sinusoids are ~35x the token embeddings at d=64: two tokens look the same (cosine 0.998)
    assert unscaled_cosine > 0.99 and cosine < 0.95


@pytest.mark.parametrize("positional", ["scaled_sinusoidal", "sinusoidal", "rope", "learned"])
def test_cramming_recipe(positional):
    config = tl.BERTConfig.cramming(
        vocab_size=101, n_ctx=24, d_model=32, n_layers=2, n_heads=4, d_ff=64, mask_token_id=3, positional=positional
    )
    model = tl.BERT(config).train()
    assert config.norm_position == "pre" and model.token_type_embedding is None
    assert isinstance(model.norm_f, tl.LayerNorm)
    assert not any(n.endswith("bias") for n, _ in model.named_parameters())
    before = snapshot(model)
    ids = torch.randint(0, 101, (2, 12))
    labels = torch.where(torch.rand(2, 12) < 0.3, ids, tl.IGNORE_INDEX)
    labels[0, 0] = ids[0, 0]
    loss = model.mlm_loss(ids, labels)
    assert loss.isfinite() and abs(loss.item() - torch.log(torch.tensor(101.0)).item()) < 1.0
    assert_unchanged(model, before)
    with pytest.raises(ValueError, match="no token-type embeddings"):
        model(ids, token_type_ids=torch.zeros_like(ids))


@pytest.mark.slow
def test_original_recipe_is_post_norm_with_token_types():
    model = tiny_bert()
    assert model.config.norm_position == "post" and isinstance(model.norm_f, torch.nn.Identity)
    assert isinstance(model.embedding_norm, tl.LayerNorm) and model.token_type_embedding is not None
    hf_count = sum(p.numel() for p in transformers.BertForMaskedLM(transformers.BertConfig()).parameters())
    assert tl.BERT(tl.BERTConfig()).num_parameters() == hf_count == 109_514_298  # BERT-base with its MLM head


@pytest.mark.offline
def test_from_pretrained_fails_clearly_offline():
    with pytest.raises(RuntimeError, match=r"could not fetch 'bert-base-uncased' from the Hugging Face Hub"):
        tl.BERT.from_pretrained("bert-base-uncased")


def test_bert_errors():
    model = tiny_bert()
    ids = torch.randint(0, 101, (2, 10))
    with pytest.raises(ValueError, match=r"sequence length 25 is longer than the context"):
        model(torch.zeros(1, 25, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token id 101, outside the vocabulary \[0, 100\]"):
        model(torch.full((1, 3), 101))
    with pytest.raises(TypeError, match="masked_positions must have dtype torch.bool, got torch.int64"):
        model(ids, masked_positions=torch.zeros(2, 10, dtype=torch.long))
    with pytest.raises(ValueError, match=r"labels must have the shape of input_ids"):
        model.mlm_loss(ids, ids[:, :5])
    with pytest.raises(ValueError, match=r"token_type_ids must have the shape of input_ids"):
        model(ids, token_type_ids=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"mask_token_id must be in \[0, 100\], got 103"):
        tl.BERTConfig(vocab_size=101, mask_token_id=103)
    with pytest.raises(ValueError, match=r"token_type_ids contains token id 2, outside the vocabulary \[0, 1\]"):
        model(ids, token_type_ids=torch.full((2, 10), 2))


def tiny_hf(cls, **overrides):
    """A Hugging Face BERT model of class ``cls`` from a tiny random config, norms and biases moved."""
    settings = dict(
        vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=24, type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    config = transformers.BertConfig(**{**settings, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def pair_batch():
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, 101, (3, 10), generator=g)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[2, 7:] = 0
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 5:] = 1
    return input_ids, attention_mask, token_type_ids


def test_sequence_classifier_matches_hugging_face():
    hf = tiny_hf(transformers.BertForSequenceClassification, num_labels=5)
    ours = tl.bert_classifier_from_hf(hf)
    input_ids, attention_mask, token_type_ids = pair_batch()
    labels = torch.tensor([0, 4, 2])
    with torch.no_grad():
        theirs = hf(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                    labels=labels)
        logits = ours(input_ids, attention_mask, token_type_ids)
        loss = ours.loss(input_ids, labels, attention_mask, token_type_ids)
    assert logits.shape == (3, 5)
    close(logits, theirs.logits, atol=1e-5)
    close(loss, theirs.loss, atol=1e-5)


def test_pretraining_heads_match_hugging_face():
    hf = tiny_hf(transformers.BertForPreTraining)
    ours = tl.bert_pretraining_from_hf(hf)
    input_ids, attention_mask, token_type_ids = pair_batch()
    labels = torch.full_like(input_ids, -100)
    labels[:, 3] = input_ids[:, 3]
    nsp = torch.tensor([0, 1, 0])
    with torch.no_grad():
        theirs = hf(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                    labels=labels, next_sentence_label=nsp)
        mlm, seq_relationship = ours(input_ids, attention_mask, token_type_ids)
        loss = ours.loss(input_ids, nsp, labels, attention_mask, token_type_ids)
    close(seq_relationship, theirs.seq_relationship_logits, atol=1e-5)
    real = attention_mask.bool()
    close(mlm[real], theirs.prediction_logits[real], atol=1e-4)
    close(loss, theirs.loss, atol=1e-4)


def test_classifier_reads_the_first_position_and_ignores_padding():
    torch.manual_seed(0)
    model = tl.BERTForSequenceClassification(tiny_bert(), n_classes=3).eval()
    ids = torch.randint(0, 101, (2, 8))
    mask = torch.ones_like(ids)
    mask[:, 6:] = 0
    before = snapshot(model)
    with torch.no_grad():
        a = model(ids, mask)
        changed = ids.clone()
        changed[:, 6:] = 7  # only padding changes
        b = model(changed, mask)
    close(a, b, atol=1e-6)
    assert_unchanged(model, before)
    assert model.bert is not None and model.pooler.dense.weight.shape == (32, 32)


def test_classifier_and_nsp_errors():
    model = tl.BERTForSequenceClassification(tiny_bert(), n_classes=3)
    ids = torch.randint(0, 101, (2, 8))
    with pytest.raises(ValueError, match=r"labels must be in \[0, 2\], got values from 0 to 3"):
        model.loss(ids, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"labels must have shape \(batch,\) = \(2,\)"):
        model.loss(ids, torch.tensor([[0, 1]]))
    with pytest.raises(TypeError, match="labels must hold integer class ids"):
        model.loss(ids, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"n_classes must be in \[2, inf\], got 1"):
        tl.BERTForSequenceClassification(tiny_bert(), n_classes=1)
    with pytest.raises(TypeError, match="bert must be a tl.BERT"):
        tl.BERTForSequenceClassification(torch.nn.Linear(2, 2), n_classes=2)
    with pytest.raises(ValueError, match="type_vocab_size=0"):
        tl.BERTForPreTraining(tiny_bert(type_vocab_size=0))
    nsp = tl.BERTForPreTraining(tiny_bert())
    with pytest.raises(ValueError, match=r"next_sentence_label must be in \[0, 1\]"):
        nsp.loss(ids, torch.tensor([0, 2]))


def test_with_new_tokens_keeps_every_old_output():
    from transformer_lib.models.bert import with_new_tokens

    torch.manual_seed(0)
    old = tiny_bert()
    grown = with_new_tokens(old, 2).eval()
    assert grown.config.vocab_size == 103 and grown.token_embedding.weight.shape == (103, 32)
    assert grown.mlm_head.decoder.weight is grown.token_embedding.weight  # still tied
    ids = torch.randint(0, 101, (2, 9))
    with torch.no_grad():
        close(grown(ids)[..., :101], old(ids), atol=1e-5)
        grown(torch.tensor([[101, 5, 102]]))  # the new ids embed
    with pytest.raises(ValueError, match=r"n_new must be in \[1, inf\], got 0"):
        with_new_tokens(old, 0)
