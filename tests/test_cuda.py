"""The library on a CUDA GPU: the same numbers as on the CPU, and the GPU-only code paths.

Marked ``cuda`` and skipped without a GPU (CI has none); ``bash scripts/gpu_run.sh`` runs them on
one. The CPU tests check each component against its reference; these check that moving the work
to CUDA (fused SDPA kernels, bf16 autocast, fused AdamW, the KV cache on the device) changes
nothing it should not.
"""

import pytest
import torch
import transformers

import transformer_lib as tl
from transformer_lib.training import TrainStep

from .conftest import LLAMA_STYLE, tiny_bert, tiny_gpt2

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
CUDA = torch.device("cuda")
# float32 on both devices; cuBLAS and the CPU sum in other orders (TF32 is off by default for matmuls)
TOL = dict(atol=2e-5, rtol=1e-4)


@pytest.fixture(autouse=True)
def _no_tf32():
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("style", ["gpt2", "llama"])
def test_gpt2_paths_on_cuda_match_the_cpu(style):
    model = tiny_gpt2(**(LLAMA_STYLE if style == "llama" else {}))
    ids = torch.randint(0, 97, (3, 20))
    keep = torch.ones_like(ids)
    keep[1, 14:] = 0  # right padding
    with torch.no_grad():
        ref = model(ids, attention_mask=keep)
        gpu = model.to(CUDA)
        for attention, kernels in ((False, False), (True, False), (True, True)):
            with tl.fast_path(gpu, attention, kernels):
                out = gpu(ids.to(CUDA), attention_mask=keep.to(CUDA)).cpu()
            torch.testing.assert_close(out[keep.bool()], ref[keep.bool()], **TOL,
                                       msg=lambda m: f"fast_path({attention}, {kernels}): {m}")


def test_gpt2_on_cuda_matches_hugging_face():
    config = transformers.GPT2Config(vocab_size=97, n_positions=24, n_embd=32, n_layer=2, n_head=4,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    hf = transformers.GPT2LMHeadModel(config).eval().to(CUDA)
    ours = tl.gpt2_from_hf(hf).to(CUDA)
    ids = torch.randint(0, 97, (2, 24), device=CUDA)
    with torch.no_grad(), tl.fast_path(ours):
        torch.testing.assert_close(ours(ids), hf(ids).logits, **TOL)


def test_bert_and_encoder_decoder_on_cuda_match_the_cpu():
    bert = tiny_bert()
    ids = torch.randint(4, 101, (2, 16))
    with torch.no_grad():
        ref = bert(ids)
        torch.testing.assert_close(bert.to(CUDA)(ids.to(CUDA)).cpu(), ref, **TOL)
    model = tl.EncoderDecoder(tl.EncoderDecoderConfig(vocab_size=31, n_ctx=16, d_model=32, n_layers=2,
                                                      n_heads=4, d_ff=64)).eval()
    src, tgt = torch.randint(3, 31, (2, 10)), torch.randint(3, 31, (2, 7))
    with torch.no_grad():
        ref = model(src, tgt)
        torch.testing.assert_close(model.to(CUDA)(src.to(CUDA), tgt.to(CUDA)).cpu(), ref, **TOL)


@pytest.mark.parametrize("style", ["gpt2", "llama"])
def test_kv_cache_on_cuda_gives_the_tokens_of_recomputation(style):
    model = tiny_gpt2(**(LLAMA_STYLE if style == "llama" else {})).to(CUDA)
    prompt = torch.randint(0, 97, (2, 5), device=CUDA)
    with tl.fast_path(model):
        cached = tl.generate(model, prompt, 30, do_sample=False, use_cache=True)  # slides past n_ctx=24
        full = tl.generate(model, prompt, 30, do_sample=False, use_cache=False)
    assert cached.device.type == "cuda" and torch.equal(cached, full)


def test_train_step_on_cuda_uses_mixed_precision_and_fused_adamw():
    model = tiny_gpt2().to(CUDA).train()
    step = TrainStep(model, tl.TrainConfig(lr=3e-3, warmup_steps=0, progress=False))
    expected = torch.bfloat16 if torch.cuda.get_device_capability()[0] >= 8 else torch.float16
    assert step.dtype == expected
    assert step.optimizer.defaults["fused"] is True
    ids = torch.randint(0, 97, (8, 24), device=CUDA)
    batch = (ids[:, :-1], ids[:, 1:])
    losses = [step(batch, 3e-3).item() for _ in range(40)]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.5 * losses[0], losses  # one batch, 40 steps: it memorises


def test_train_on_cuda_returns_the_model_in_eval_mode_with_finite_losses():
    data = torch.randint(0, 97, (4000,))
    model = tiny_gpt2()
    state = tl.train(model, tl.BatchSampler(data, 8, 16, seed=0), tl.BatchSampler(data, 8, 16, seed=1),
                     tl.TrainConfig(max_steps=30, warmup_steps=3, eval_interval=10, eval_steps=2,
                                    device="cuda", progress=False))
    assert next(model.parameters()).device.type == "cuda" and not model.training
    assert all(torch.isfinite(torch.tensor([h["val_loss"] for h in state.history])))


def test_this_gpu_has_a_known_peak_for_mfu():
    name = torch.cuda.get_device_name()
    assert tl.speed.peak_flops(name) is not None, f"add {name!r} to speed.PEAK_FLOPS"
