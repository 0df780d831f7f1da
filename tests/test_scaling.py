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


def saved_values_per_token(config, batch=2, checkpointed=False):
    """What autograd keeps for the backward pass, per token, on the fast path (parameters and their
    copies, which do not grow with the tokens, measured away by two sequence lengths); with
    ``checkpointed``, every block runs under torch.utils.checkpoint."""
    from torch.utils.checkpoint import checkpoint

    from transformer_lib.distributed import transformer_blocks

    def saved(seq):
        torch.manual_seed(0)
        model = tl.GPT2(config).train()
        for block in transformer_blocks(model) if checkpointed else []:
            forward = block.forward
            block.forward = lambda *a, f=forward, **k: checkpoint(f, *a, use_reentrant=False, **k)
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


def test_checkpointed_activations_are_what_autograd_keeps():
    """With every block under torch.utils.checkpoint, autograd keeps each block's input (d_model values per
    token) and the output part; the calculator adds one block's activations, recomputed in the backward pass."""
    config = tl.GPT2Config(vocab_size=65, n_ctx=32, d_model=64, n_layers=3, n_heads=4)
    measured = saved_values_per_token(config, checkpointed=True)
    values = scaling.activation_values_per_token(config)
    kept = config.n_layers * config.d_model + values["output"] - config.vocab_size  # as in the test above
    assert measured == pytest.approx(kept, rel=0.05)
    tokens = 100
    full = scaling.activation_bytes(config, tokens, "fp32")
    checkpointed = scaling.activation_bytes(config, tokens, "fp32", checkpointing=True)
    assert checkpointed == tokens * 4 * (config.n_layers * config.d_model + values["per layer"] + values["output"])
    assert checkpointed < full


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
    merged = [b for b in bars if b["count"] > 1]  # a merged bar's hover says what it holds, not "113 operations"
    assert merged and all(b["name"].startswith(f"{b['count']} operations, the longest: ") and " ms" in b["name"]
                          for b in merged)
    assert scaling._communication("gloo:all_gather") == "all-gather"
    assert scaling._communication("ncclDevKernel_ReduceScatter_Sum_f32") == "reduce-scatter"
    assert scaling._communication("aten::mm") is None


def fake_event(name, start, end, *, gpu=False, thread=1, parent=None, id=0, launched_by=0):
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), thread=thread,
                           cpu_parent=parent, id=id, linked_correlation_id=launched_by,
                           device_type=DeviceType.CUDA if gpu else DeviceType.CPU)


def test_step_timeline_on_a_gpu_uses_the_gpus_kernels():
    """On a GPU the CPU only queues kernels (here in 0.1 ms each), which run later and longer on the GPU: the
    bars are the kernels, each in the phase of the operation that launched it, NCCL's in communication."""
    forward = fake_event("DistributedDataParallel.forward", 0, 300, id=1)
    mm = fake_event("aten::mm", 100, 200, parent=forward, id=2)
    backward = fake_event("autograd::engine::evaluate_function: MmBackward0", 400, 500, thread=2, id=3)
    mm_back = fake_event("aten::mm", 410, 490, thread=2, parent=backward, id=4)
    allreduce = fake_event("nccl:all_reduce", 500, 600, thread=2, id=5)  # the CPU side of the collective
    fsdp = fake_event("FSDP::all_gather_copy_in", 50, 90, parent=forward, id=6)
    optimizer = fake_event("Optimizer.step#AdamW.step", 700, 800, id=7)
    adam = fake_event("aten::_fused_adamw_", 710, 790, parent=optimizer, id=8)
    events = [forward, mm, backward, mm_back, allreduce, fsdp, optimizer, adam,
              fake_event("Memcpy HtoD", 1000, 1500, gpu=True, launched_by=6),          # FSDP's copy
              fake_event("ampere_sgemm", 2000, 6000, gpu=True, launched_by=2),          # forward
              fake_event("ampere_sgemm", 6000, 14000, gpu=True, launched_by=4),         # backward
              fake_event("ncclDevKernel_AllReduce_Sum_f32", 9000, 15000, gpu=True, launched_by=5),
              fake_event("multi_tensor_apply_kernel", 15000, 16000, gpu=True, launched_by=8)]
    bars = scaling.step_timeline(events)
    got = {(b["lane"], b["phase"], b["start"], b["end"]) for b in bars}
    assert got == {("compute", "FSDP hooks", 0.0, 0.5), ("compute", "forward", 1.0, 5.0),
                   ("compute", "backward", 5.0, 13.0), ("communication", "all-reduce", 8.0, 14.0),
                   ("compute", "optimizer", 14.0, 15.0)}
    summary = scaling.timeline_summary(bars)
    assert summary["step"] == 15.0 and summary["communication"] == 6.0 and summary["overlapped"] == 5.0
    assert summary["compute"] == 13.0 and summary["backward"] == 8.0 and summary["FSDP hooks"] == 0.5
    # without kernels (a CPU), the same events give the CPU operations' own times
    cpu = scaling.step_timeline([e for e in events if e.device_type != events[-1].device_type])
    assert max(b["end"] for b in cpu) == pytest.approx(0.8)


def test_step_timeline_callback_profiles_several_steps_and_takes_the_median():
    model = tl.GPT2(tl.GPT2Config(vocab_size=65, n_ctx=16, d_model=32, n_layers=1, n_heads=4))
    timeline = scaling.StepTimeline(step=5, steps=3)
    tl.train(model, tl.BatchSampler(torch.arange(500) % 65, 4, 16), None,
             tl.TrainConfig(max_steps=6, warmup_steps=1, eval_interval=100, eval_steps=1, progress=False),
             callbacks=[timeline])
    assert len(timeline.timelines) == 3
    lengths = sorted(scaling.timeline_summary(bars)["step"] for bars in timeline.timelines)
    assert scaling.timeline_summary(timeline.bars)["step"] == lengths[1]
    assert scaling.median_summary(timeline.timelines)["step"] == lengths[1]
    with pytest.raises(ValueError, match=r"steps must be in \[1, 2\], got 3"):
        scaling.StepTimeline(step=2, steps=3)


def test_log_ticks_label_every_tick():
    assert figures.log_ticks(0.3, 150) == [0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200]
    assert figures.log_ticks(1, 100) == [1, 2, 5, 10, 20, 50, 100]


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
    timeline = figures.timeline_explorer({"one process": bars, "DDP": bars, "FSDP": bars})
    assert len(timeline.layout.updatemenus[0].buttons) == 3 and len(timeline.data) == 6
    assert timeline.layout.legend.y > 1  # above the plot: tidy stacks it under the menu, at any width
    memory = {m: {"memory": {s: [scaling.memory_per_gpu(10**6 * (k + 1), n, s) for n in (1, 2, 4)]
                             for s in scaling.STRATEGIES}} for k, m in enumerate("ab")}
    for m in memory.values():  # FSDP with activation checkpointing: its own line, as the chapter draws it
        m["memory"][figures.CHECKPOINTED] = m["memory"]["ZeRO-3 / FSDP"]
    lines = figures.memory_explorer(memory, [1, 2, 4], {"16 GB": 16e9})
    assert len(lines.data) == 2 * 5 + 1 and lines.layout.updatemenus[0].buttons[1].label == "b"
    assert sum(lines.layout.updatemenus[0].buttons[1].args[0]["visible"]) == 5 + 1  # and the 16 GB line
    assert list(lines.layout.yaxis.ticktext)[:3] == ["0.002", "0.005", "0.01"] and lines.layout.yaxis.type == "log"
    assert lines.data[4].line.dash == "dash"  # FSDP with activation checkpointing
    parts = figures.memory_breakdown(memory, [1, 2, 4], at=4)
    assert len(parts.data) == 2 * 4 and list(parts.data[0].x) == ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3<br>FSDP",
                                                                  "ZeRO-3 +<br>checkpointing"]
    assert parts.data[0].y[0] == pytest.approx(2e6 / 2**30) and "4 GPUs" in parts.layout.title.text
