"""Every tensor the library creates follows its inputs' device (the chapters run on a GPU in Colab).

Tested on the CPU: inside ``with torch.device("meta")`` a tensor created without ``device=`` lands
on the meta device, and combining it with the CPU inputs fails. A function that derives every
device from its inputs (``device=x.device``, ``zeros_like``) runs as usual and returns CPU tensors;
one that relies on the default device would, on a GPU, mix CPU tensors into CUDA ones.
"""

import pytest
import torch

import transformer_lib as tl


def on_default_meta(fn, *args, **kwargs):
    with torch.device("meta"):
        return fn(*args, **kwargs)


def all_on_cpu(out) -> bool:
    tensors = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else [out]
    return all(t.device.type == "cpu" for t in tensors)


def test_mlm_collator_follows_the_batch_device():
    ids = torch.randint(4, 50, (8, 16))
    ids[:, -3:] = 0  # padding
    expected = tl.MLMCollator(50, mask_token_id=3, special_ids=[0], pad_token_id=0, seed=1)(ids)
    out = on_default_meta(tl.MLMCollator(50, mask_token_id=3, special_ids=[0], pad_token_id=0, seed=1), ids)
    assert all_on_cpu(out)
    for key in expected:  # the same draws: the generator's numbers do not depend on the batch's device
        assert torch.equal(out[key], expected[key]), key


def test_mlm_collator_fallback_choice_follows_the_batch_device():
    collator = tl.MLMCollator(50, mask_token_id=3, special_ids=[0], seed=1)
    out = on_default_meta(collator, torch.randint(4, 50, (1, 2)))  # so short that the fallback picks one position
    assert all_on_cpu(out) and (out["labels"] != tl.IGNORE_INDEX).sum() >= 1


@pytest.mark.slow
@pytest.mark.parametrize("llama", [False, True], ids=["gpt2", "llama"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_follows_the_input_device(llama, use_cache):
    torch.manual_seed(0)
    swaps = dict(norm="rmsnorm", positional="rope", ffn="swiglu", bias=False, tie_weights=False) if llama else {}
    model = tl.GPT2(tl.GPT2Config(vocab_size=50, n_ctx=8, d_model=32, n_layers=2, n_heads=2, **swaps)).eval()
    prompt = torch.randint(0, 50, (2, 3))
    kw = dict(top_k=5, top_p=0.9, use_cache=use_cache)
    expected = tl.generate(model, prompt, 10, generator=torch.Generator().manual_seed(0), **kw)  # slides past n_ctx
    out = on_default_meta(tl.generate, model, prompt, 10, generator=torch.Generator().manual_seed(0), **kw)
    assert out.device.type == "cpu" and torch.equal(out, expected)


def test_models_follow_the_input_device():
    torch.manual_seed(0)
    ids = torch.randint(4, 50, (2, 8))
    gpt2 = tl.GPT2(tl.GPT2Config(vocab_size=50, n_ctx=8, d_model=32, n_layers=1, n_heads=2)).eval()
    assert on_default_meta(gpt2.loss, ids, ids, attention_mask=torch.ones_like(ids)).device.type == "cpu"
    with tl.capture_attention(gpt2) as maps:
        on_default_meta(gpt2, ids)
    assert all_on_cpu(list(maps.values()))

    bert = tl.BERT(tl.BERTConfig(vocab_size=50, n_ctx=8, d_model=32, n_layers=1, n_heads=2, d_ff=64, mask_token_id=3))
    batch = tl.MLMCollator(50, mask_token_id=3, seed=0)(ids)
    assert on_default_meta(bert.mlm_loss, **batch).device.type == "cpu"

    seq2seq = tl.EncoderDecoder(tl.EncoderDecoderConfig(vocab_size=13, n_ctx=8, d_model=32, n_layers=1, n_heads=2,
                                                        d_ff=64)).eval()
    src = torch.randint(0, 10, (2, 5))
    out = on_default_meta(seq2seq.generate, src, 11, 4, 12, src_attention_mask=torch.ones_like(src))
    assert out.device.type == "cpu" and out.shape == (2, 5)


def test_batches_follow_the_generator_device():
    data = torch.arange(1000) % 50
    expected = tl.BatchSampler(data, 4, 16, seed=3)()
    out = on_default_meta(tl.BatchSampler(data, 4, 16, seed=3))
    assert all_on_cpu(out) and all(torch.equal(a, b) for a, b in zip(out, expected))  # the same windows


@pytest.mark.slow
def test_training_follows_the_model_device():
    """tl.train (TrainStep, the evaluations, the batches) creates nothing on the default device."""
    data = torch.randint(0, 50, (5000,), generator=torch.Generator().manual_seed(0))
    config = tl.TrainConfig(max_steps=4, eval_interval=2, eval_steps=2, device="cpu", progress=False)

    def run(default_meta: bool):
        torch.manual_seed(0)
        model = tl.GPT2(tl.GPT2Config(vocab_size=50, n_ctx=16, d_model=32, n_layers=1, n_heads=2))
        args = (model, tl.BatchSampler(data, 4, 16, seed=0), tl.BatchSampler(data, 4, 16, seed=1), config)
        return on_default_meta(tl.train, *args) if default_meta else tl.train(*args)

    losses = [[(h["train_loss"], h["val_loss"]) for h in run(meta).history] for meta in (True, False)]
    assert len(losses[0]) == 3 and losses[0] == losses[1]
