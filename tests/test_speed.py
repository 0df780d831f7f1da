"""speed: FLOPs and MFU, the GPU peak table, timing, the per-part profile of a step, peak memory."""

import time

import pytest
import torch

import transformer_lib as tl
from transformer_lib import speed
from transformer_lib.training import TrainStep

from .conftest import tiny_gpt2


@pytest.mark.slow
def test_flops_per_token_of_gpt2_small():
    model = tl.GPT2(tl.GPT2Config())
    # 124,439,808 parameters less the 1024 x 768 position table (a lookup, not a matrix product);
    # the tied token embedding is the head's matrix, so it stays
    n = 124_439_808 - 1024 * 768
    assert speed.matmul_parameters(model) == n
    attention = 12 * 12 * 12 * 64 * 1024  # 12 L H d_head T with L = H = 12, d_head = 64, T = 1024
    assert speed.model_flops_per_token(model) == 6 * n + attention
    assert speed.model_flops_per_token(model, seq_len=256) == 6 * n + attention // 4
    assert speed.flops_per_token(n, 12, 12, 64, 1024) == 6 * n + attention


def test_matmul_parameters_leave_out_lookup_tables_only():
    tied = tiny_gpt2()
    untied = tiny_gpt2(tie_weights=False)
    rope = tiny_gpt2(positional="rope")
    V, d, n_ctx = 97, 32, 24
    assert speed.matmul_parameters(tied) == tied.num_parameters() - n_ctx * d
    assert speed.matmul_parameters(untied) == untied.num_parameters() - n_ctx * d - V * d  # the head stays
    assert speed.matmul_parameters(rope) == rope.num_parameters()  # rotary positions have no parameters


def test_mfu_and_errors():
    assert speed.mfu(1e5, 1e9, 1e15) == pytest.approx(0.1)
    with pytest.raises(ValueError, match=r"peak must be a number > 0, got 0"):
        speed.mfu(1e5, 1e9, 0)
    with pytest.raises(ValueError, match=r"tokens_per_second must be a number >= 0"):
        speed.mfu(-1.0, 1e9, 1e15)
    with pytest.raises(ValueError, match=r"seq_len must be in \[0, inf\]"):
        speed.flops_per_token(10, 1, 1, 1, -1)


@pytest.mark.parametrize(
    "name, peak",
    [("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H200", 989e12),
     ("NVIDIA A100-SXM4-40GB", 312e12), ("Tesla T4", 65e12), ("NVIDIA L4", 121e12), ("NVIDIA L40S", 362e12),
     ("NVIDIA L40", 181e12)],
)
def test_peak_flops_by_device_name(name, peak):
    assert speed.peak_flops(name) == peak


def test_unknown_device_has_no_peak():
    assert speed.peak_flops("Some Future Accelerator") is None


def test_time_calls_warms_up_then_times_each_repeat():
    calls = []
    times = speed.time_calls(lambda: calls.append(1), warmup=2, repeats=4, number=3)
    assert len(calls) == 2 + 4 * 3 and len(times) == 4 and all(t >= 0 for t in times)
    with pytest.raises(ValueError, match=r"repeats must be in \[1, inf\], got 0"):
        speed.time_calls(lambda: None, repeats=0)


def make_step(use_sdpa: bool, batch: int = 4):
    torch.manual_seed(0)
    model = tl.GPT2(tl.GPT2Config(vocab_size=65, n_ctx=32, d_model=32, n_layers=2, n_heads=4, use_sdpa=use_sdpa)).train()
    step = TrainStep(model, tl.TrainConfig(device="cpu", progress=False))
    batches = tl.BatchSampler(torch.arange(3000) % 65, batch, 32)
    step(batches(), 1e-3)  # the optimizer state exists from here on
    return model, step, lambda: step(batches(), 1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("use_sdpa", [False, True])
def test_profile_puts_time_in_every_part_of_a_step(use_sdpa):
    model, _, run = make_step(use_sdpa)
    parts = speed.profile_step(run, model, steps=2)
    assert list(parts) == list(speed.PARTS)
    for part in ("attention", "FFN", "norms", "embeddings", "output head", "loss", "optimizer"):
        assert parts[part] > 0, part
    # the explicit path forms the softmax weights; the fused kernel never does
    assert (parts["softmax"] > 0) == (not use_sdpa)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())  # hooks removed


@pytest.mark.slow
def test_peak_memory_counts_the_state_and_grows_with_the_batch():
    model, step, run_small = make_step(False, batch=2)
    state_bytes = 4 * 4 * sum(p.numel() for p in model.parameters())  # fp32 weights, gradients, 2 Adam moments
    small = speed.peak_memory(run_small, model, step.optimizer)
    model, step, run_large = make_step(False, batch=16)
    large = speed.peak_memory(run_large, model, step.optimizer)
    assert state_bytes < small < large


def test_machine_description():
    info = speed.machine()
    assert info["cpu"] and info["cpu_cores"] >= 1 and info["torch_threads"] >= 1
    assert info["torch"] == torch.__version__ and len(info["load_average"]) == 3


# ---- the fast path ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [{}, {"norm": "rmsnorm", "ffn": "swiglu", "positional": "rope", "ffn_multiple_of": 16},
                                       {"ffn": "gelu", "dropout": 0.0}, {"ffn": "relu"}])
def test_fast_path_computes_the_same_function_and_gradients(overrides):
    model = tiny_gpt2(**overrides).train()
    ids = torch.randint(0, 97, (3, 16))

    def loss_and_grads():
        model.zero_grad()
        loss = model.loss(ids[:, :-1], ids[:, 1:])
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    explicit_loss, explicit_grads = loss_and_grads()
    with tl.fast_path(model):
        fast_loss, fast_grads = loss_and_grads()
    torch.testing.assert_close(fast_loss, explicit_loss, atol=1e-6, rtol=1e-5)
    for name, grad in explicit_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, atol=1e-6, rtol=1e-4, msg=f"gradient of {name}")


def test_fast_path_switches_every_module_and_restores():
    model = tiny_gpt2().eval()
    layers = [m for m in model.modules() if isinstance(m, tl.MultiHeadAttention)]
    fusable = [m for m in model.modules() if isinstance(m, (tl.FeedForward, tl.LayerNorm))]
    layers[1].use_sdpa = True  # a mixed model comes back mixed
    ids = torch.randint(0, 97, (2, 9))
    with tl.fast_path(model) as m:
        assert m is model and all(x.use_sdpa for x in layers) and all(x.fused for x in fusable)
        with tl.capture_attention(model) as maps:  # capturing still sees the weights
            model(ids)
        assert len(maps) == 2 and maps["blocks.0.attn"].shape == (2, 4, 9, 9)
    assert [x.use_sdpa for x in layers] == [False, True] and not any(x.fused for x in fusable)
    with tl.fast_path(model, attention=True, kernels=False):
        assert all(x.use_sdpa for x in layers) and not any(x.fused for x in fusable)
    with tl.fast_path(model, attention=False, kernels=False):
        assert not any(x.use_sdpa for x in layers)
    with pytest.raises(TypeError, match=r"attention must be True or False, got str 'yes'"):
        with tl.fast_path(model, "yes"):
            pass


def test_time_interleaved_alternates_and_shortens_slow_steps():
    order = []
    runs = speed.time_interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                                  warmup=1, repeats=3, min_run_seconds=0.0)
    assert [len(v) for v in runs.values()] == [3, 3]
    assert order[-6:] == ["a", "b"] * 3  # timed in turn, after each one's warm-up
    slow = speed.time_interleaved({"slow": lambda: time.sleep(0.03)}, warmup=2, repeats=5, slow_step_seconds=0.01,
                                  slow_repeats=2, min_run_seconds=0.0)
    assert len(slow["slow"]) == 2 and min(slow["slow"]) >= 0.03


def test_set_cpu_threads_is_one_thread_on_a_cpu_only():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        tl.set_cpu_threads("cuda")  # a GPU run keeps PyTorch's CPU threads
        assert torch.get_num_threads() == 2
        tl.set_cpu_threads("cpu")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
