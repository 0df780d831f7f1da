"""The measurements of ``python -m benchmarks``: training throughput, convergence, generation, GPU.

Every timing is the median of several timed runs after a warm-up (``transformer_lib.speed``);
variants that are compared (written out vs fast path vs nanoGPT's model.py, eager vs compiled) are
timed in the same run, in turn, so that a change in the machine's load hits them alike.
"""

from __future__ import annotations

import copy
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

import transformer_lib as tl
from transformer_lib import speed
from transformer_lib.training import TrainStep, estimate_loss

from .reference import from_library

MiB = 2**20
YARDSTICK = "nanoGPT"  # the name of benchmarks/reference.py's model in the results


@dataclass(frozen=True)
class Setting:
    """A model size and a batch: what one row group of the table trains."""

    name: str
    n_layers: int
    n_heads: int
    d_model: int
    n_ctx: int
    batch: int
    dropout: float = 0.0
    vocab_size: int = 65  # Tiny Shakespeare's characters
    vocab_multiple_of: int = 1
    bias: bool = False  # nanoGPT's train.py default: no biases in the linear layers and LayerNorms
    # nanoGPT's MLP: nn.GELU(), the exact GELU (GPT-2's own is "gelu_tanh"); the same function in
    # the library and the yardstick, so that the speed ratio compares code, not activations
    ffn: str = "gelu"
    source: str = ""

    def gpt2_config(self, use_sdpa: bool) -> tl.GPT2Config:
        return tl.GPT2Config(vocab_size=self.vocab_size, n_ctx=self.n_ctx, d_model=self.d_model, n_layers=self.n_layers,
                             n_heads=self.n_heads, dropout=self.dropout, use_sdpa=use_sdpa,
                             vocab_multiple_of=self.vocab_multiple_of, bias=self.bias, ffn=self.ffn)

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.n_ctx

    def describe(self) -> str:
        gelu = {"gelu": "exact GELU", "gelu_tanh": "tanh GELU"}.get(self.ffn, self.ffn)
        return (f"{self.n_layers} layers, {self.n_heads} heads, d_model {self.d_model}, context {self.n_ctx}, "
                f"batch {self.batch}, dropout {self.dropout}, {'with' if self.bias else 'no'} biases, {gelu}")


# nanoGPT's README, its CPU run ("I only have a macbook"): --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --dropout=0.0;
# "baby" is this book's label (nanoGPT gives "baby GPT" to the shakespeare_char config below)
BABY = Setting("baby", 4, 4, 128, 64, 12, 0.0, source="nanoGPT README, CPU run")
# nanoGPT's config/train_shakespeare_char.py ("baby GPT model :)" for a GPU)
SHAKESPEARE_CHAR = Setting("shakespeare_char", 6, 6, 384, 256, 64, 0.2, source="nanoGPT config/train_shakespeare_char.py")
# GPT-2 small (124M) with nanoGPT's vocabulary padding 50257 -> 50304
GPT2_SMALL = Setting("gpt2-124M", 12, 12, 768, 1024, 16, 0.0, vocab_size=50257, vocab_multiple_of=64, bias=True,
                    ffn="gelu_tanh", source="GPT-2 small")


@dataclass
class Options:
    device: torch.device
    repeats: int = 5  # timed runs per figure (the median is reported)
    warmup: int = 2  # untimed steps first
    min_run_seconds: float = 0.3  # each timed run repeats the step until it lasts about this long
    slow_step_seconds: float = 2.0  # a step slower than this ...
    slow_repeats: int = 3  # ... is timed this many times (shakespeare_char on a CPU: 15-30 s per step)
    compile: bool = True
    quick: bool = False
    settings: tuple[Setting, ...] = (BABY, SHAKESPEARE_CHAR)
    new_tokens: int = 256
    generation_repeats: int = 3
    convergence_steps: int = 2000
    convergence_target: float | None = 1.88
    gpu_batch: int = 16
    gpu_peak_flops: float | None = None
    gpu_target: float = 1.47
    log: Callable[[str], None] = print
    seed: int = 0


def _train_config(device: torch.device, **overrides) -> tl.TrainConfig:
    # fused AdamW for every variant: what differs between them is the model's kernels
    settings = dict(lr=1e-3, betas=(0.9, 0.99), device=str(device), progress=False, fused_optimizer=True)
    return tl.TrainConfig(**{**settings, **overrides})


def _random_batches(setting: Setting, device: torch.device, seed: int):
    data = torch.randint(0, setting.vocab_size, (max(100_000, 4 * setting.tokens_per_step),),
                         generator=torch.Generator().manual_seed(seed))
    return tl.BatchSampler(data, setting.batch, setting.n_ctx, seed=seed, device=device)


def interleaved_medians(fns: dict[Any, Callable[[], object]], opts: Options) -> dict[Any, list[float]]:
    """:func:`transformer_lib.speed.time_interleaved` with the run's options."""
    return speed.time_interleaved(fns, warmup=opts.warmup, repeats=opts.repeats, min_run_seconds=opts.min_run_seconds,
                                  slow_step_seconds=opts.slow_step_seconds, slow_repeats=opts.slow_repeats,
                                  device=opts.device)


# ------------------------------------------------------------------------------------ throughput


def throughput(opts: Options) -> list[dict]:
    """Tokens/s of a training step (forward, backward, clipping, AdamW) per setting, model and compilation.

    Three models with the same weights: the library written out (explicit attention, activation and
    norms, what the chapters read), the library on its fast path (``tl.fast_path``: fused attention,
    activation and norm kernels), and the yardstick, nanoGPT's ``model.py`` (``benchmarks/reference.py``);
    each eager and, with ``opts.compile``, compiled (a copy with its own optimizer, compiled before the
    timing starts). All variants of a setting are timed in turn in one run, so every ratio compares
    figures measured side by side.
    """
    rows = []
    for setting in opts.settings:
        torch.manual_seed(opts.seed)
        explicit = tl.GPT2(setting.gpt2_config(use_sdpa=False)).to(opts.device).train()
        models = {"explicit": explicit, "fast": copy.deepcopy(explicit)}
        if setting.vocab_multiple_of == 1:
            models[YARDSTICK] = from_library(explicit).to(opts.device).train()
        variants = {(name, False): m for name, m in models.items()}
        if opts.compile:
            variants.update({(name, True): copy.deepcopy(m) for name, m in models.items()})
        with ExitStack() as stack:
            for (name, _), m in variants.items():
                if name == "fast":
                    stack.enter_context(tl.fast_path(m))  # until this setting is done
            with torch.no_grad():  # the three compute the same function before we time them
                ids = _random_batches(setting, opts.device, 99)()[0][:2]
                ref = explicit.eval()(ids)
                for (name, _), m in variants.items():
                    logits = m.eval().full_logits(ids) if name == YARDSTICK else m.eval()(ids)
                    err = (logits.float() - ref.float()).abs().max().item()
                    if err > 1e-3:
                        raise AssertionError(f"{setting.name}: {name} logits differ from the explicit path's by {err:.2e}")
                    m.train()
            torch._dynamo.reset()  # a fresh compilation per setting: no stale graphs, no recompile limit
            steps, fns = {}, {}
            for key, m in variants.items():
                steps[key] = TrainStep(m, _train_config(opts.device, compile=key[1]))
                fns[key] = lambda s=steps[key], b=_random_batches(setting, opts.device, opts.seed): s(b(), 1e-4)
            start = time.perf_counter()
            if opts.compile:
                opts.log(f"  {setting.name}: compiling {', '.join(models)} ...")
                for key, fn in fns.items():
                    if key[1]:
                        fn()  # compile now, outside the timed runs
                opts.log(f"    compiled in {time.perf_counter() - start:.0f} s")
                start = time.perf_counter()
            opts.log(f"  {setting.name}: timing {len(fns)} variants in turn ...")
            runs = interleaved_medians(fns, opts)  # keyed (name, compiled)
            group = []
            for (name, compiled), m in variants.items():
                memory = None if compiled else speed.peak_memory(fns[name, compiled], m, steps[name, compiled].optimizer) / MiB
                step_s = speed.median(runs[name, compiled])
                group.append({
                    "setting": setting.name, "compiled": compiled, "attention": name,
                    "step_ms": step_s * 1e3, "tokens_per_s": setting.tokens_per_step / step_s,
                    "runs_ms": [r * 1e3 for r in runs[name, compiled]], "peak_memory_mib": memory,
                })
        get = {(r["attention"], r["compiled"]): r for r in group}
        for r in group:
            r["vs_explicit"] = r["tokens_per_s"] / get["explicit", r["compiled"]]["tokens_per_s"]
            if r["compiled"]:
                r["vs_eager"] = r["tokens_per_s"] / get[r["attention"], False]["tokens_per_s"]
        rows += group
        opts.log(f"    done in {time.perf_counter() - start:.0f} s: "
                 + ", ".join(f"{r['attention']}{' compiled' if r['compiled'] else ''} {r['tokens_per_s']:,.0f} tok/s" for r in group))
    torch._dynamo.reset()
    return rows


# ------------------------------------------------------------------------------------ generation


def generation(opts: Options) -> list[dict]:
    """Tokens/s of greedy generation with and without the KV cache (fast path), and whether the tokens agree."""
    rows = []
    for setting in opts.settings:
        torch.manual_seed(opts.seed)
        model = tl.GPT2(setting.gpt2_config(use_sdpa=True)).to(opts.device).eval()
        prompt = torch.zeros(1, 1, dtype=torch.long, device=opts.device)  # one token, then opts.new_tokens more
        outputs, runs = {}, {}
        fns = {}
        for use_cache in (True, False):
            def run(use_cache=use_cache):
                outputs[use_cache] = tl.generate(model, prompt, opts.new_tokens, do_sample=False, use_cache=use_cache)
            fns[use_cache] = run
        with tl.fast_path(model):  # the fused kernels for the activations and norms too
            for use_cache in fns:  # warm up on a few tokens
                tl.generate(model, prompt, 4, do_sample=False, use_cache=use_cache)
                runs[use_cache] = []
            for _ in range(opts.generation_repeats):  # in turn, round by round: a burst of load hits both
                for use_cache, fn in fns.items():
                    runs[use_cache] += speed.time_calls(fn, warmup=0, repeats=1, device=opts.device)
        cached, full = (opts.new_tokens / speed.median(runs[c]) for c in (True, False))
        rows.append({
            "setting": setting.name, "new_tokens": opts.new_tokens, "context": setting.n_ctx,
            "with_cache_tokens_per_s": cached, "without_cache_tokens_per_s": full, "speedup": cached / full,
            "with_cache_runs_s": runs[True], "without_cache_runs_s": runs[False],  # every timed run, in turn
            "same_tokens": bool(torch.equal(outputs[True], outputs[False])),
            "window_slides": prompt.shape[1] + opts.new_tokens - 1 > setting.n_ctx,  # the last step's input outgrows it
        })
        opts.log(f"  {setting.name}: {cached:,.0f} vs {full:,.0f} tokens/s ({cached / full:.1f}x), "
                 f"same tokens: {rows[-1]['same_tokens']}")
    return rows


# ----------------------------------------------------------------------------------- convergence


def shakespeare() -> tuple[torch.Tensor, torch.Tensor, tl.CharTokenizer]:
    text = tl.load_tiny_shakespeare()
    tok = tl.CharTokenizer.from_text(text)
    train_ids, val_ids = tl.train_val_split(torch.tensor(tok.encode(text)), 0.1)
    return train_ids, val_ids, tok


class _Reached(Exception):
    """Raised by :class:`_StopAt` to end a run once it reaches its target."""


class _StopAt(tl.Callback):
    def __init__(self, target: float | None) -> None:
        self.target, self.reached = target, None

    def on_eval(self, state, model) -> None:
        if self.target is not None and state.val_loss is not None and state.val_loss <= self.target and self.reached is None:
            self.reached = {"step": state.step, "seconds": state.elapsed, "val_loss": state.val_loss}
            raise _Reached


def convergence(opts: Options, setting: Setting = BABY, steps: int | None = None, eval_interval: int = 250,
                eval_steps: int = 20, target: float | None = None, stop_at_target: bool = False,
                compile: bool = False, plain: bool = False) -> dict:
    """Train ``setting`` on Tiny Shakespeare with nanoGPT's recipe; the final validation loss and the time.

    lr 1e-3 with 100 warm-up steps, cosine to 1e-4 at the last step, AdamW betas (0.9, 0.99),
    weight decay 0.1, clipping at 1, batches of ``setting.batch`` windows of ``setting.n_ctx``.
    The final loss is estimated twice: on ``eval_steps`` batches as nanoGPT does (``eval_iters``)
    and on 200 batches, a steadier estimate. ``plain``: train the yardstick, nanoGPT's ``model.py``
    (``benchmarks/reference.py``), instead, from the same initial weights on the same batches.
    """
    steps = steps or opts.convergence_steps
    target = opts.convergence_target if target is None else target
    train_ids, val_ids, tok = shakespeare()
    torch.manual_seed(opts.seed)
    model = tl.GPT2(replace(setting, vocab_size=tok.vocab_size).gpt2_config(use_sdpa=False))
    if plain:
        model = from_library(model)
    warmup = min(100, steps // 2)
    config = _train_config(opts.device, max_steps=steps, min_lr=1e-4, warmup_steps=warmup, fast_path=True,
                           eval_interval=eval_interval, eval_steps=eval_steps, seed=opts.seed, compile=compile)
    stop = _StopAt(target if stop_at_target else None)
    train_batches = tl.BatchSampler(train_ids, setting.batch, setting.n_ctx, seed=0)
    val_batches = tl.BatchSampler(val_ids, setting.batch, setting.n_ctx, seed=1)
    opts.log(f"  {setting.name}{f' ({YARDSTICK})' if plain else ''}: {steps} steps of {setting.batch} x {setting.n_ctx} tokens ...")
    start = time.perf_counter()
    try:
        state = tl.train(model, train_batches, val_batches, config, callbacks=[stop])
        history = state.history
    except _Reached:
        history = None
    seconds = time.perf_counter() - start
    model.eval()
    steady = estimate_loss(model, tl.BatchSampler(val_ids, setting.batch, setting.n_ctx, seed=2), 200,
                           device=opts.device, dtype=tl.training.mixed_precision_dtype(opts.device))
    result = {
        "setting": setting.name, "model": YARDSTICK if plain else "library", "steps": steps, "warmup_steps": warmup, "seconds": seconds, "target": target,
        "val_loss": history[-1]["val_loss"] if history else stop.reached["val_loss"],
        "val_loss_200_batches": steady, "eval_steps": eval_steps,
        "history": [{k: h[k] for k in ("step", "train_loss", "val_loss", "elapsed")} for h in (history or [])],
    }
    if stop_at_target:
        result["reached"] = stop.reached
    elif target is not None:
        # nanoGPT's 1.88 was measured on eval_iters=20 batches: compare like with like, and report the steadier one too
        result["passed"] = result["val_loss"] <= target
        result["passed_200_batches"] = steady <= target
    opts.log(f"    {seconds:.0f} s, validation loss {result['val_loss']:.4f} ({eval_steps} batches), "
             f"{steady:.4f} (200 batches)")
    return result


# ------------------------------------------------------------------------------------------- GPU


def _gpt2_step(setting: Setting, opts: Options, name: str):
    """GPT-2 small on the fast path, compiled (the first step, timed apart: compilation)."""
    torch.manual_seed(opts.seed)
    model = tl.GPT2(setting.gpt2_config(use_sdpa=True)).to(opts.device).train()
    step = TrainStep(model, _train_config(opts.device, compile=True))
    batches = _random_batches(setting, opts.device, opts.seed)

    def fn():
        with tl.fast_path(model):  # the fused activation and norm kernels too (compile fuses them anyway)
            return step(batches(), 1e-4)

    opts.log(f"  {setting.name} on {name}, batch {setting.batch} x {setting.n_ctx}: compiling ...")
    start = time.perf_counter()
    fn()
    speed.synchronize(opts.device)
    return model, step, fn, time.perf_counter() - start


def gpu(opts: Options) -> dict:
    """GPT-2 small training step in bf16 with the fast path and torch.compile, its MFU; shakespeare_char to 1.47."""
    if opts.device.type != "cuda":
        reason = "no CUDA device" if not torch.cuda.is_available() else f"--device {opts.device.type}"
        return {"skipped": f"skipped: {reason} (the GPU section needs one)"}
    return gpu_measurements(opts, torch.cuda.get_device_name(opts.device))


def gpu_measurements(opts: Options, name: str) -> dict:
    """The GPU section's measurements on ``opts.device``, a GPU called ``name``."""
    peak = opts.gpu_peak_flops or speed.peak_flops(name)
    batch = opts.gpu_batch
    while True:  # halve the batch until a step fits in this GPU's memory
        setting = replace(GPT2_SMALL, batch=batch)
        if opts.quick:
            setting = replace(setting, n_layers=2, batch=min(batch, 2))
        try:
            model, step, fn, compile_s = _gpt2_step(setting, opts, name)
            break
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError, or wrapped in a compilation error
            if "out of memory" not in str(e).lower():
                raise
            model = step = fn = None
            torch._dynamo.reset()
            torch.cuda.empty_cache()
            if batch == 1:
                raise
            opts.log(f"    batch {batch} does not fit in memory; trying {batch // 2}")
            batch //= 2
    runs = interleaved_medians({"gpt2": fn}, opts)["gpt2"]
    step_s = speed.median(runs)
    tokens_per_s = setting.tokens_per_step / step_s
    flops = speed.model_flops_per_token(model, setting.n_ctx)
    result = {
        "device": name, "setting": setting.describe(), "vocab": f"{setting.vocab_size} padded to {model.config.padded_vocab_size}",
        "dtype": {torch.bfloat16: "bfloat16 autocast", torch.float16: "float16 autocast", None: "float32"}[step.dtype],
        "compile_seconds": compile_s, "step_ms": step_s * 1e3, "runs_ms": [r * 1e3 for r in runs],
        "tokens_per_s": tokens_per_s, "flops_per_token": flops, "peak_flops": peak,
        "mfu": speed.mfu(tokens_per_s, flops, peak) if peak else None,
        "peak_memory_mib": speed.peak_memory(fn, model, step.optimizer) / MiB,
    }
    opts.log(f"    {step_s * 1e3:.1f} ms per step, {tokens_per_s:,.0f} tokens/s"
             + (f", MFU {result['mfu']:.1%}" if peak else f" (peak FLOP/s of {name!r} unknown: pass --peak-flops)"))
    del model, step
    torch._dynamo.reset()
    if opts.device.type == "cuda":
        torch.cuda.empty_cache()
    steps = 200 if opts.quick else 5000
    result["time_to_target"] = convergence(opts, SHAKESPEARE_CHAR, steps=steps, eval_interval=50 if opts.quick else 250,
                                           eval_steps=20 if opts.quick else 200, target=opts.gpu_target,
                                           stop_at_target=True, compile=True)
    return result
