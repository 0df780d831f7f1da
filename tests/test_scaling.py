"""scaling: the ring all-reduce against a sum, the memory calculator against autograd's saved tensors and
a measured peak, the step timeline, and chapter 12's figures."""

import pytest
import torch

import transformer_lib as tl
from transformer_lib import scaling
from transformer_lib.viz import scaling as figures

LLAMA = dict(norm="rmsnorm", positional="rope", ffn="swiglu", bias=False, tie_weights=False)


@pytest.mark.parametrize("n, size", [(1, 5), (2, 7), (3, 10), (4, 1000), (8, 9)])
def test_ring_all_reduce_leaves_the_sum_everywhere(n, size):
    g = torch.Generator().manual_seed(n)
    vectors = [torch.randn(size, generator=g) for _ in range(n)]
    results, steps = scaling.ring_all_reduce(vectors)
    for r in results:
        torch.testing.assert_close(r, sum(vectors), rtol=1e-5, atol=1e-6)
    assert len(steps) == 2 * (n - 1)
    if n > 1:
        after_scatter = steps[n - 2].holds  # each worker holds one chunk summed over all, chunk (i + 1) % n
        for i in range(n):
            assert after_scatter[i][(i + 1) % n] == frozenset(range(n))
        assert all(h == frozenset(range(n)) for row in steps[-1].holds for h in row)
    # every step, every worker sends one chunk, a different one to each neighbour
    assert all(sorted(s.sent) == list(range(n)) for s in steps)
    assert torch.equal(vectors[0], torch.randn(size, generator=torch.Generator().manual_seed(n)))  # inputs kept


def test_ring_bytes_and_errors():
    assert scaling.ring_bytes_sent(1000, 1) == 0
    assert scaling.ring_bytes_sent(1000, 4) == 1500
    chunk_bytes = 1000 / 4  # what the simulation sends: one chunk per step, 2 (N - 1) steps
    assert scaling.ring_bytes_sent(1000, 4) == 2 * 3 * chunk_bytes
    with pytest.raises(ValueError, match="every worker's vector must have the same shape"):
        scaling.ring_all_reduce([torch.zeros(3), torch.zeros(4)])


def test_memory_per_gpu_follows_the_zero_table():
    n_params, n = 1000, 4
    for precision, (w, g, o) in (("bf16", (2, 2, 12)), ("fp32", (4, 4, 8))):
        expected = {"DDP": (w, g, o), "ZeRO-1": (w, g, o / n), "ZeRO-2": (w, g / n, o / n),
                    "ZeRO-3 / FSDP": (w / n, g / n, o / n)}
        for strategy, (ew, eg, eo) in expected.items():
            got = scaling.memory_per_gpu(n_params, n, strategy, precision, activations=7.0)
            assert got == {"weights": ew * n_params, "gradients": eg * n_params, "optimizer state": eo * n_params,
                           "activations": 7.0}
    with pytest.raises(ValueError, match=r"strategy must be one of .*got 'ZeRO-4'"):
        scaling.memory_per_gpu(10, 2, "ZeRO-4")
    with pytest.raises(ValueError, match=r"world_size must be in \[1, inf\], got 0"):
        scaling.memory_per_gpu(10, 0, "DDP")


def test_parameter_counts_of_the_calculators_models():
    """GPT-2 small as Hugging Face counts it (tied head), and Llama 2 7B's published 6,738,415,616."""
    assert scaling.count_parameters_of(tl.GPT2Config()) == 124_439_808
    llama = tl.GPT2Config(vocab_size=32000, n_ctx=4096, d_model=4096, n_layers=32, n_heads=32, d_ff=11008, **LLAMA)
    assert scaling.count_parameters_of(llama) == 6_738_415_616
    small = tl.GPT2Config(vocab_size=65, n_ctx=16, d_model=32, n_layers=2, n_heads=4)
    assert scaling.count_parameters_of(small) == tl.GPT2(small).num_parameters()


def saved_values_per_token(config, batch=2):
    """What autograd keeps for the backward pass, per token, on the fast path (parameters and their
    copies, which do not grow with the tokens, measured away by two sequence lengths)."""
    def saved(seq):
        torch.manual_seed(0)
        model = tl.GPT2(config).train()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        kept = {}

        def pack(t):
            key = t.untyped_storage().data_ptr()
            if key not in params:
                kept[key] = t.untyped_storage().nbytes() // t.element_size()
            return t

        ids = torch.randint(0, config.vocab_size, (batch, seq + 1))
        with tl.fast_path(model), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model.loss(ids[:, :-1], ids[:, 1:])
        return sum(kept.values())

    long, short = config.n_ctx, config.n_ctx // 2
    return (saved(long) - saved(short)) / (batch * (long - short))


@pytest.mark.parametrize("extra", [{}, LLAMA], ids=["gpt", "llama"])
def test_activation_count_is_what_autograd_keeps(extra):
    config = tl.GPT2Config(vocab_size=65, n_ctx=32, d_model=64, n_layers=2, n_heads=4, **extra)
    counted = scaling.activation_values_per_token(config)
    measured = saved_values_per_token(config)
    # the formula leaves out a few values per token (norm statistics, attention's log-sum-exp, the
    # targets) and counts the logits' gradient, which is made in the backward pass, not kept before it
    assert measured == pytest.approx(counted["total"] - config.vocab_size, rel=0.05)


def test_the_calculator_is_near_a_measured_peak():
    config = tl.GPT2Config(vocab_size=200, n_ctx=32, d_model=64, n_layers=2, n_heads=4)

    def two_steps():
        torch.manual_seed(0)
        model = tl.GPT2(config).train()
        step = tl.TrainStep(model, tl.TrainConfig(device="cpu"))
        ids = torch.randint(0, 200, (8, 33))
        with tl.fast_path(model):
            for _ in range(2):
                step((ids[:, :-1], ids[:, 1:]), 1e-3)

    measured = scaling.peak_allocated(two_steps)
    n = scaling.count_parameters_of(config)
    predicted = sum(scaling.memory_per_gpu(n, 1, "DDP", "fp32",
                                           scaling.activation_bytes(config, 8 * 32, "fp32")).values())
    assert 16 * n < measured  # weights, gradients and AdamW's moments at least
    assert measured == pytest.approx(predicted, rel=0.15)


def test_step_timeline_sorts_a_profiled_step():
    from torch.profiler import ProfilerActivity, profile

    model = tl.GPT2(tl.GPT2Config(vocab_size=65, n_ctx=16, d_model=32, n_layers=2, n_heads=4))
    step = tl.TrainStep(model, tl.TrainConfig(device="cpu"))
    batch = tl.BatchSampler(torch.arange(500) % 65, 4, 16)
    step(batch(), 1e-3)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(batch(), 1e-3)
    bars = scaling.step_timeline(prof.events())
    phases = [b["phase"] for b in bars]
    assert {"forward", "backward", "optimizer"} <= set(phases)
    first = {p: min(b["start"] for b in bars if b["phase"] == p) for p in ("forward", "backward", "optimizer")}
    assert first["forward"] < first["backward"] < first["optimizer"]
    summary = scaling.timeline_summary(bars)
    assert summary["communication"] == 0 and 0 < summary["compute"] <= summary["step"]
    assert scaling._communication("gloo:all_gather") == "all-gather"
    assert scaling._communication("ncclDevKernel_ReduceScatter_Sum_f32") == "reduce-scatter"
    assert scaling._communication("aten::mm") is None


def test_figures_have_working_controls():
    _, steps = scaling.ring_all_reduce([torch.randn(8) for _ in range(4)])
    ring = figures.ring_explorer(steps, n_bytes=4e6)
    slider = ring.layout.sliders[0]
    assert len(slider.steps) == len(ring.data) == 7
    assert sum(slider.steps[3].args[0]["visible"]) == 1 and "reduce-scatter, step 3 of 3" in slider.steps[3].args[1][
        "title.text"]
    assert "3.0 of 6.0 MiB" not in slider.steps[3].args[1]["title.text"] and "of 5.7 MiB" in slider.steps[3].args[1][
        "title.text"]
    bars = [{"lane": "compute", "phase": "forward", "start": 0.0, "end": 1.0, "name": "x"},
            {"lane": "communication", "phase": "all-reduce", "start": 0.5, "end": 2.0, "name": "gloo:all_reduce"}]
    timeline = figures.timeline_explorer({"DDP": bars, "FSDP": bars})
    assert len(timeline.layout.updatemenus[0].buttons) == 2 and len(timeline.data) == 4
    memory = {"m": {"bars_at": 1, "memory": {s: [scaling.memory_per_gpu(10**6, n, s) for n in (1, 2)]
                                             for s in scaling.STRATEGIES}}}
    fig = figures.memory_explorer(memory, [1, 2], {"16 GB": 16e9})
    assert len(fig.data) == 9 and fig.layout.updatemenus[0].buttons[0].label == "m"  # and the 16 GB line
