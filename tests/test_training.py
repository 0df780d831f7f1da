"""training: schedule, optimizer groups, the loop lowers the loss, checkpoints, speed vs a plain loop."""

import math
import time

import pytest
import torch

import transformer_lib as tl
from transformer_lib.training import TrainStep, autocast_settings, make_optimizer, mixed_precision_dtype

from .conftest import close, tiny_gpt2


def test_warmup_then_cosine():
    lrs = [tl.lr_at(s, 1e-3, 1e-4, 10, 110) for s in range(120)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)  # linear warm-up
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:10]))
    assert lrs[60] == pytest.approx(1e-4 + 0.5 * (1 + math.cos(math.pi * 0.5)) * 9e-4)  # halfway down the cosine
    assert all(a >= b for a, b in zip(lrs[10:110], lrs[11:111]))
    assert lrs[110] == lrs[119] == pytest.approx(1e-4)


def test_inverse_sqrt_schedule_is_the_papers():
    """Vaswani et al. 2017, eq. 3: lrate = d_model^-0.5 * min(n^-0.5, n * warmup^-1.5), n = step + 1."""
    peak = tl.transformer_peak_lr(512, 4000)
    assert peak == pytest.approx(6.9877e-4, rel=1e-4)
    for step in (0, 1, 999, 3998, 3999, 4000, 10_000, 99_999):
        n = step + 1
        paper = 512**-0.5 * min(n**-0.5, n * 4000**-1.5)
        assert tl.inverse_sqrt_lr(step, peak, 4000) == pytest.approx(paper, rel=1e-12)
    lrs = [tl.inverse_sqrt_lr(s, 1.0, 10) for s in range(40)]
    assert max(lrs) == lrs[9] == 1.0 and lrs[39] == pytest.approx(math.sqrt(10 / 40))


@pytest.mark.slow
def test_train_uses_the_chosen_schedule_and_adam_eps():
    model = tiny_gpt2()
    data = torch.randint(0, 97, (2000,))
    seen = []

    class Lrs(tl.Callback):
        def on_step(self, state, model):
            seen.append(state.lr)

    config = tl.TrainConfig(max_steps=12, lr=1e-3, warmup_steps=4, schedule="inverse_sqrt", eps=1e-9,
                            eval_interval=100, eval_steps=1, device="cpu", progress=False)
    tl.train(model, tl.BatchSampler(data, 2, 8), config=config, callbacks=[Lrs()])
    assert seen == pytest.approx([tl.inverse_sqrt_lr(s, 1e-3, 4) for s in range(12)])
    step = TrainStep(tiny_gpt2(), config)
    assert all(g["eps"] == 1e-9 for g in step.optimizer.param_groups)
    with pytest.raises(ValueError, match=r"schedule must be one of \('cosine', 'inverse_sqrt'\), got 'noam'"):
        tl.TrainConfig(schedule="noam")


def test_label_smoothing_matches_torch_and_is_only_in_training():
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5))
    targets[0, 0] = tl.IGNORE_INDEX
    smoothed = tl.causal_lm_loss(logits, targets, label_smoothing=0.1)
    # by hand: (1 - eps) * NLL + eps * mean over the vocabulary of -log p, over the counted positions
    logp, keep = logits.log_softmax(-1).flatten(0, 1), targets.flatten() != tl.IGNORE_INDEX
    nll = -logp[keep].gather(1, targets.flatten()[keep, None]).squeeze(1)
    by_hand = (0.9 * nll + 0.1 * -logp[keep].mean(-1)).mean()
    assert smoothed.item() == pytest.approx(by_hand.item(), rel=1e-6)
    assert tl.causal_lm_loss(logits, targets).item() == pytest.approx(nll.mean().item(), rel=1e-6)
    model = tiny_gpt2()
    x, y = torch.randint(0, 97, (2, 8)), torch.randint(0, 97, (2, 8))
    assert model.loss(x, y, label_smoothing=0.1) > model.loss(x, y)
    with pytest.raises(ValueError, match=r"label_smoothing must be a number in \[0, 1\), got 1.0"):
        model.loss(x, y, label_smoothing=1.0)
    config = tl.TrainConfig(label_smoothing=0.1, device="cpu", progress=False)
    step = TrainStep(model, config)
    assert step.loss_fn(model, (x, y)).item() == pytest.approx(model.loss(x, y, label_smoothing=0.1).item())
    with pytest.raises(ValueError, match=r"label_smoothing=...\), but your loss_fn has no such argument"):
        TrainStep(model, config, loss_fn=lambda m, b: m.loss(*b))
    own = TrainStep(model, config, loss_fn=lambda m, b, label_smoothing=0.0: m.loss(*b, label_smoothing=label_smoothing))
    assert own.loss_fn(model, (x, y)).item() == pytest.approx(model.loss(x, y, label_smoothing=0.1).item())


def test_weight_decay_only_on_matrices_and_tied_tensor_once():
    model = tiny_gpt2()
    opt = make_optimizer(model, 1e-3, weight_decay=0.1)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    n = sum(p.numel() for g in opt.param_groups for p in g["params"])
    assert n == model.num_parameters()  # the tied head is not optimised twice


def toy_task(seed=0):
    """Predict the next token of a repeating pattern: learnable in a few dozen steps."""
    data = torch.arange(2000) % 7
    return tl.BatchSampler(data, batch_size=8, block_size=16, seed=seed)


@pytest.mark.slow
def test_training_lowers_the_loss_and_records_history():
    model = tiny_gpt2(vocab_size=7, n_ctx=16)
    config = tl.TrainConfig(max_steps=60, lr=3e-3, warmup_steps=5, eval_interval=20, eval_steps=2, progress=False, device="cpu")
    state = tl.train(model, toy_task(), toy_task(1), config)
    assert [h["step"] for h in state.history] == [0, 20, 40, 60]
    first, last = state.history[0], state.history[-1]
    assert first["train_loss"] == pytest.approx(math.log(7), abs=0.3)
    assert last["val_loss"] < 0.5 * first["val_loss"]
    assert not model.training


def test_default_loss_names_the_missing_method():
    config = tl.TrainConfig(max_steps=2, eval_interval=2, eval_steps=1, progress=False, device="cpu")
    with pytest.raises(TypeError, match=r"Linear has no loss\(\) method: pass loss_fn"):
        tl.train(torch.nn.Linear(4, 4), toy_task(), None, config)


def test_callbacks_see_every_evaluation():
    seen = []

    class Spy(tl.Callback):
        def on_train_start(self, state, model):
            seen.append("start")

        def on_eval(self, state, model):
            seen.append(state.step)

        def on_train_end(self, state, model):
            seen.append("end")

    config = tl.TrainConfig(max_steps=4, eval_interval=2, eval_steps=1, progress=False, device="cpu")
    tl.train(tiny_gpt2(vocab_size=7, n_ctx=16), toy_task(), None, config, callbacks=[Spy()])
    assert seen == ["start", 0, 2, 4, "end"]


def test_checkpoint_round_trip(tmp_path):
    model = tiny_gpt2()
    opt = make_optimizer(model, 1e-3)
    model.loss(*toy_task()()).backward()
    opt.step()
    path = tl.save_checkpoint(tmp_path / "ckpt.pt", model, opt, step=7)
    fresh = tiny_gpt2()
    fresh_opt = make_optimizer(fresh, 1e-3)
    assert tl.load_checkpoint(path, fresh, fresh_opt) == {"step": 7}
    ids = torch.randint(0, 97, (2, 8))
    close(fresh(ids), model(ids))
    assert fresh.lm_head.weight is fresh.token_embedding.weight
    assert fresh_opt.state_dict()["state"].keys() == opt.state_dict()["state"].keys()
    with pytest.raises(ValueError, match="different config"):
        tl.load_checkpoint(path, tiny_gpt2(d_model=64))


def test_config_errors():
    with pytest.raises(ValueError, match=r"min_lr must be in \[0, lr=0.001\]"):
        tl.TrainConfig(lr=1e-3, min_lr=1e-2)
    with pytest.raises(ValueError, match=r"max_steps must be in \[1, inf\], got 0"):
        tl.TrainConfig(max_steps=0)


def test_mixed_precision_choice():
    assert autocast_settings(torch.device("cpu"), True) == (None, False)
    assert autocast_settings(torch.device("cpu"), False) == (None, False)


@pytest.mark.parametrize("capability, expected", [((7, 5), (torch.float16, True)),  # T4: bf16 only emulated
                                                  ((7, 0), (torch.float16, True)),  # V100
                                                  ((8, 0), (torch.bfloat16, False)),  # A100
                                                  ((8, 9), (torch.bfloat16, False)),  # L4
                                                  ((9, 0), (torch.bfloat16, False))])  # H100
def test_mixed_precision_on_gpus(monkeypatch, capability, expected):
    """bf16 only where the GPU computes it natively: torch.cuda.is_bf16_supported() says yes on a T4 too."""
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # what a T4 answers by default
    assert autocast_settings(torch.device("cuda"), True) == expected
    assert autocast_settings(torch.device("cuda"), False) == (None, False)
    assert mixed_precision_dtype("cuda:0") == expected[0]
    assert mixed_precision_dtype("cpu") is None


@pytest.mark.slow
def test_loop_is_as_fast_as_a_plain_loop():
    """The library loop may not be slower than the hand-written nanoGPT-style loop it replaces."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # timings on a shared 2-core machine are steadier on one thread
    steps = 30

    def make():
        torch.manual_seed(0)
        return tl.GPT2(tl.GPT2Config(vocab_size=65, n_ctx=64, d_model=64, n_layers=2, n_heads=4))

    def plain():
        model, batches = make(), tl.BatchSampler(torch.arange(5000) % 65, 12, 64)
        opt = make_optimizer(model, 1e-3)
        start = time.perf_counter()
        for _ in range(steps):
            loss = model.loss(*batches())
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    def library():
        model, batches = make(), tl.BatchSampler(torch.arange(5000) % 65, 12, 64)
        config = tl.TrainConfig(max_steps=steps, eval_interval=10_000, eval_steps=1, progress=False, device="cpu")
        start = time.perf_counter()
        tl.train(model, batches, None, config)
        return time.perf_counter() - start

    try:
        plain_s = min(plain() for _ in range(3))
        library_s = min(library() for _ in range(3))
    finally:
        torch.set_num_threads(threads)
    assert library_s < 1.25 * plain_s, f"library loop {library_s:.3f}s vs plain {plain_s:.3f}s"


# ---- speed options (chapter 11) ------------------------------------------------------------------


def test_fused_optimizer_options():
    model = tiny_gpt2()
    assert make_optimizer(model, 1e-3, fused=True).defaults["fused"] is True  # PyTorch has a CPU kernel
    assert not make_optimizer(model, 1e-3).defaults["fused"]  # None: CUDA only, so CPU results keep their digits
    assert not make_optimizer(model, 1e-3, fused=False).defaults["fused"]
    for name in ("fused_optimizer", "fast_path"):
        with pytest.raises(TypeError, match=rf"{name} must be True or False, got str 'yes'"):
            tl.TrainConfig(**{name: "yes"})


@pytest.mark.slow
def test_fast_path_while_training_only():
    seen = []

    def switches(model):
        return ([m.use_sdpa for m in model.modules() if isinstance(m, tl.MultiHeadAttention)]
                + [m.fused for m in model.modules() if isinstance(m, (tl.FeedForward, tl.LayerNorm))])

    class Spy(tl.Callback):
        def on_eval(self, state, model):
            seen.append(switches(model))

    model = tiny_gpt2(vocab_size=7, n_ctx=16)
    config = tl.TrainConfig(max_steps=4, eval_interval=2, eval_steps=1, progress=False, device="cpu", fast_path=True)
    tl.train(model, toy_task(), None, config, callbacks=[Spy()])
    assert seen == [[True] * (2 + 2 + 5)] * 3  # 2 attentions, 2 FFNs, 5 LayerNorms
    assert switches(model) == [False] * 9


@pytest.mark.slow
def test_fast_options_train_to_the_same_losses():
    """Fused kernels and fused AdamW round differently, nothing more: the same run, the same losses."""
    histories = []
    for fast in (None, True):
        model = tiny_gpt2(vocab_size=7, n_ctx=16)
        config = tl.TrainConfig(max_steps=40, lr=3e-3, warmup_steps=5, eval_interval=20, eval_steps=2, progress=False,
                                device="cpu", fast_path=fast, fused_optimizer=fast)
        histories.append([h["val_loss"] for h in tl.train(model, toy_task(), toy_task(1), config).history])
    assert histories[0][-1] < 0.5 * histories[0][0]  # it learned
    assert histories[1] == pytest.approx(histories[0], rel=1e-3)


@pytest.mark.slow
def test_compile_compiles_the_models_forward(monkeypatch):
    """``compile=True`` must trace the model itself: ``torch.compile(model).loss`` would run it uncompiled."""
    import torch._dynamo

    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real_compile(fn, backend=record))
    torch._dynamo.reset()
    model = tiny_gpt2(n_layers=2)
    step = TrainStep(model, tl.TrainConfig(compile=True, device="cpu", progress=False))
    x, y = toy_task()()
    expected = model.loss(x, y).item()
    loss = step((x, y), 1e-3)
    torch._dynamo.reset()
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert len(graphs) == 1  # the whole forward and the loss, no graph breaks
    linears = [n for n in graphs[0].graph.nodes if "linear" in str(n.target)]
    assert len(linears) == 2 * 6 + 1  # W_Q, W_K, W_V, W_O, W_in, W_out per layer, and the head


@pytest.mark.slow
def test_step_reads_back_nothing_but_the_id_checks():
    """No ``.item()`` per step (a GPU sync): on the CPU only the checks of the token ids and of the targets
    read two numbers each (free there; on a GPU inside ``hot_path`` they are device-side asserts)."""
    from torch.profiler import ProfilerActivity, profile

    model = tiny_gpt2(vocab_size=7, n_ctx=16).train()
    step = TrainStep(model, tl.TrainConfig(device="cpu", progress=False, fused_optimizer=True))
    batches = toy_task()
    step(batches(), 1e-3)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step(batches(), 1e-3)
    reads = [e for e in prof.events() if e.name == "aten::item" and e.cpu_parent is None]
    assert len(reads) == 4 * 3  # lo and hi of the ids and of the targets, per step
