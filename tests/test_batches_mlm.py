"""data.batches and data.mlm."""

import pytest
import torch

import transformer_lib as tl


def test_split_is_contiguous():
    ids = torch.arange(100)
    train, val = tl.train_val_split(ids, 0.1)
    assert torch.equal(train, ids[:90]) and torch.equal(val, ids[90:])
    with pytest.raises(ValueError, match=r"val_fraction must be in \(0, 1\)"):
        tl.train_val_split(ids, 1.0)


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
