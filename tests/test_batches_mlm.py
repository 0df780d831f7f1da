"""data.batches and data.mlm."""

import pytest
import torch

import transformer_lib as tl


def test_split_is_contiguous():
    ids = torch.arange(100)
    train, val = tl.train_val_split(ids, 0.1)
    assert torch.equal(train, ids[:90]) and torch.equal(val, ids[90:])
    with pytest.raises(ValueError, match=r"val_fraction must be in \(0, 0.5\), got 1.0"):
        tl.train_val_split(ids, 1.0)
    # nanoGPT's 0.9 is the *training* share: read as a validation share it would train on 10 %
    with pytest.raises(ValueError, match=r"got 0.9: it is the held-out share, so 0.9 would validate on 90% "
                                         r"and train on 10%.*pass val_fraction=0.1"):
        tl.train_val_split(ids, 0.9)
    with pytest.raises(ValueError, match=r"val_fraction must be in \(0, 0.5\), got '0.1'"):
        tl.train_val_split(ids, "0.1")


def test_batches_are_shifted_windows_and_reproducible():
    data = torch.arange(1000)
    x, y = tl.BatchSampler(data, batch_size=4, block_size=8, seed=3)()
    assert x.shape == y.shape == (4, 8) and x.dtype == torch.long
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y[:, -1], x[:, -1] + 1)
    assert torch.equal(x, tl.BatchSampler(data, 4, 8, seed=3)()[0])
    assert not torch.equal(x, tl.BatchSampler(data, 4, 8, seed=4)()[0])
    with pytest.raises(ValueError, match="block_size=8 needs at least 9"):
        tl.get_batch(torch.arange(8), 2, 8)


def test_mlm_proportions():
    collator = tl.MLMCollator(vocab_size=1000, mask_token_id=3, special_ids=[0, 1, 2], pad_token_id=0, seed=0)
    ids = torch.randint(4, 1000, (200, 128))
    ids[:, -8:] = 0  # padding is never masked
    out = collator(ids)
    chosen = out["labels"] != tl.IGNORE_INDEX
    maskable = ids != 0
    assert not chosen[~maskable].any()
    assert chosen.sum() / maskable.sum() == pytest.approx(0.15, abs=0.01)
    masked = chosen & (out["input_ids"] == 3)
    unchanged = chosen & (out["input_ids"] == ids)
    random = chosen & ~masked & ~unchanged
    n = chosen.sum().item()
    assert masked.sum() / n == pytest.approx(0.8, abs=0.02)
    assert unchanged.sum() / n == pytest.approx(0.1, abs=0.02)  # (random may hit the same id, rarely)
    assert random.sum() / n == pytest.approx(0.1, abs=0.02)
    assert torch.equal(out["labels"][chosen], ids[chosen])
    assert not torch.isin(out["input_ids"][random], torch.tensor([0, 1, 2, 3])).any()
    assert torch.equal(out["input_ids"][~chosen], ids[~chosen])
    assert torch.equal(out["attention_mask"], maskable.long())


def test_mlm_batch_always_has_a_target_and_trains_bert():
    collator = tl.MLMCollator(vocab_size=50, mask_token_id=3, special_ids=[0], seed=1)
    out = collator(torch.randint(4, 50, (1, 2)))
    assert (out["labels"] != tl.IGNORE_INDEX).sum() >= 1
    bert = tl.BERT(tl.BERTConfig(vocab_size=50, n_ctx=16, d_model=32, n_layers=1, n_heads=2, d_ff=64, mask_token_id=3))
    batch = collator(torch.randint(4, 50, (4, 16)))
    assert tl.training.default_loss(bert, batch).isfinite()


def test_mlm_fixed_count_is_berts_rule():
    """fixed_count: min(max_predictions, max(1, round(0.15 n))) per sequence, never [CLS]/[SEP]/padding."""
    pad, cls, sep, mask = 0, 1, 2, 3
    lengths = [128, 100, 10, 3, 40, 30]  # tokens before padding, [CLS] and [SEP] included
    ids = torch.randint(4, 1000, (len(lengths), 128))
    for b, n in enumerate(lengths):
        ids[b, 0], ids[b, n - 1], ids[b, n:] = cls, sep, pad
    collator = tl.MLMCollator(1000, mask, special_ids=[pad, cls, sep], pad_token_id=pad, seed=0,
                              fixed_count=True, max_predictions=18)
    # 19.2 -> 19, capped at 18; 15.0; 1.5 -> 2 and 4.5 -> 4 (Python's round, BERT's: halves to even);
    # 0.45 -> 0 -> at least 1; 6.0
    assert collator.per_sequence(ids).tolist() == [18, 15, 2, 1, 6, 4]
    for seed in range(5):
        collator.generator.manual_seed(seed)
        out = collator(ids)
        chosen = out["labels"] != tl.IGNORE_INDEX
        assert chosen.sum(1).tolist() == [18, 15, 2, 1, 6, 4]
        assert not chosen[torch.isin(ids, torch.tensor([pad, cls, sep]))].any()
        assert torch.equal(out["labels"][chosen], ids[chosen])
    no_cap = tl.MLMCollator(1000, mask, special_ids=[pad, cls, sep], pad_token_id=pad, fixed_count=True)
    assert no_cap.per_sequence(ids).tolist() == [19, 15, 2, 1, 6, 4]
    every = torch.full((200, 201), 7)
    every[torch.arange(201)[None, :] >= torch.arange(2, 202)[:, None]] = pad  # n = 2 .. 201 tokens
    assert no_cap.per_sequence(every).tolist() == [max(1, round(0.15 * n)) for n in range(2, 202)]
    # a sequence with fewer maskable tokens than its count: all of them; none: nothing chosen
    short = torch.tensor([[cls, 7, sep, pad], [cls, sep, pad, pad]])
    assert no_cap.per_sequence(short).tolist() == [1, 0]
    assert ((no_cap(short)["labels"] != tl.IGNORE_INDEX).sum(1) == torch.tensor([1, 0])).all()
    with pytest.raises(ValueError, match="pass fixed_count=True too"):
        tl.MLMCollator(1000, mask, max_predictions=20)


def test_mlm_fixed_count_is_uniform_and_keeps_the_split():
    collator = tl.MLMCollator(1000, 3, special_ids=[0, 1, 2], seed=0, fixed_count=True)
    ids = torch.randint(4, 1000, (4000, 20))
    out = collator(ids)
    chosen = out["labels"] != tl.IGNORE_INDEX
    assert (chosen.sum(1) == 3).all()  # round(0.15 * 20) = 3 in every row
    # every position equally likely: 3/20 each, within 4 standard errors of 4000 draws
    share = chosen.float().mean(0)
    assert ((share - 0.15).abs() < 4 * (0.15 * 0.85 / 4000) ** 0.5).all()
    masked = chosen & (out["input_ids"] == 3)
    assert masked.sum() / chosen.sum() == pytest.approx(0.8, abs=0.02)


def test_mlm_random_from_vocab_draws_every_id():
    """random_from_vocab: the replacements come from the whole vocabulary, special ids included."""
    collator = tl.MLMCollator(8, 3, special_ids=[0, 1, 2], seed=0, random_from_vocab=True, random_fraction=0.2)
    ids = torch.randint(4, 8, (400, 50))
    out = collator(ids)
    chosen = out["labels"] != tl.IGNORE_INDEX
    changed = chosen & (out["input_ids"] != ids) & (out["input_ids"] != 3)
    assert set(out["input_ids"][changed].tolist()) == {0, 1, 2, 4, 5, 6, 7}  # specials too
    default = tl.MLMCollator(8, 3, special_ids=[0, 1, 2], seed=0, random_fraction=0.2)(ids)
    assert not torch.isin(default["input_ids"], torch.tensor([0, 1, 2])).any()
