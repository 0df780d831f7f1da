"""benchmarks/: the smoke run of ``python -m benchmarks --quick``, the yardstick model, the report."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import transformer_lib as tl
from transformer_lib import speed
from benchmarks import report
from benchmarks.reference import from_library

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quick_run_prints_the_tables_and_writes_the_results(tmp_path):
    """The whole code path on small sizes (about 20 s): every section, the files, the table."""
    run = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--threads", "1", "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = json.loads((tmp_path / f"quick-{device}.json").read_text())
    assert (tmp_path / f"quick-{device}.md").read_text() in run.stdout  # the printed table is the file's
    assert results["machine"]["torch_threads"] == 1 and len(results["load_before"]) == 3
    rows = results["throughput"]
    assert {(r["setting"], r["attention"]) for r in rows} == {
        (s, a) for s in ("baby", "tiny") for a in ("explicit", "fast", "nanoGPT")}
    for r in rows:
        assert r["tokens_per_s"] > 0 and len(r["runs_ms"]) == 3 and r["peak_memory_mib"] > 0
        if r["attention"] == "explicit":
            assert r["vs_explicit"] == 1.0
    assert "| baby | fast |" in run.stdout and "vs explicit" in run.stdout
    assert all(g["same_tokens"] for g in results["generation"])
    # every timed generation run is kept, with and without the cache, for the spread the chapter shows
    assert all(len(g["with_cache_runs_s"]) == len(g["without_cache_runs_s"]) == 1 for g in results["generation"])
    lib, plain = results["convergence"], results["convergence_plain"]
    assert lib["steps"] == 30 and lib["val_loss"] < 4.2  # ln 65: it learned
    # the yardstick from the same weights on the same batches: the same run, up to float rounding
    assert (lib["model"], plain["model"]) == ("library", "nanoGPT")
    assert abs(lib["val_loss_200_batches"] - plain["val_loss_200_batches"]) < 2e-3
    assert "| library | 30 |" in run.stdout and "| nanoGPT | 30 |" in run.stdout
    if device == "cpu":
        assert results["gpu"] == {"skipped": "skipped: no CUDA device (the GPU section needs one)"}
        assert "Skipped: no CUDA device" in run.stdout


@pytest.mark.slow
def test_bad_arguments_are_named():
    run = subprocess.run([sys.executable, "-m", "benchmarks", "--repeats", "0"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2 and "--repeats must be >= 1, got 0" in run.stderr


@pytest.mark.parametrize("ffn", ["gelu", "gelu_tanh"])
def test_plain_reference_computes_what_the_library_computes(ffn):
    torch.manual_seed(0)
    model = tl.GPT2(tl.GPT2Config(vocab_size=65, n_ctx=32, d_model=64, n_layers=2, n_heads=4, ffn=ffn)).eval()
    plain = from_library(model).eval()
    ids = torch.randint(0, 65, (2, 32))
    torch.testing.assert_close(plain.full_logits(ids), model(ids), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(plain(ids)[0], model(ids)[:, -1:], atol=1e-5, rtol=1e-5)  # nanoGPT's inference shortcut
    torch.testing.assert_close(plain.loss(ids[:, :-1], ids[:, 1:]), model.loss(ids[:, :-1], ids[:, 1:]))
    with pytest.raises(ValueError, match="copies GPT-2-style models only"):
        from_library(tl.GPT2(tl.GPT2Config(vocab_size=65, n_ctx=32, d_model=64, n_layers=1, n_heads=4, norm="rmsnorm")))


@pytest.mark.slow
def test_the_yardstick_is_nanogpts_code_path(monkeypatch):
    """What nanoGPT's model.py runs: one c_attn product, is_causal SDPA, exact GELU, no value read back."""
    from torch import nn
    from torch.profiler import ProfilerActivity, profile

    from benchmarks import reference

    torch.manual_seed(0)
    config = tl.GPT2Config(vocab_size=65, n_ctx=32, d_model=64, n_layers=2, n_heads=4, ffn="gelu", bias=False)
    plain = from_library(tl.GPT2(config)).train()
    assert plain.lm_head.weight is plain.transformer.wte.weight  # tied: one tensor
    for block in plain.transformer.h:
        assert [n for n, m in block.attn.named_children() if isinstance(m, nn.Linear)] == ["c_attn", "c_proj"]
        assert block.attn.c_attn.weight.shape == (3 * 64, 64)  # Q, K and V from one matrix product
        assert type(block.mlp.gelu) is nn.GELU and block.mlp.gelu.approximate == "none"  # nanoGPT's nn.GELU()
        assert type(block.ln_1) is reference.LayerNorm and block.ln_1.bias is None
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording_sdpa(*args, **kwargs):
        calls.append(kwargs)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording_sdpa)
    ids = torch.randint(0, 65, (2, 33))
    x, y = ids[:, :-1], ids[:, 1:].clone()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss = plain.loss(x, y)
        loss.backward()
    assert [(c["is_causal"], c["attn_mask"], c["dropout_p"]) for c in calls] == [(True, None, 0.0)] * 2
    assert not [e for e in prof.events() if e.name in ("aten::item", "aten::aminmax", "aten::_local_scalar_dense")]
    y[:, :5] = -1  # nanoGPT's ignore_index
    logits = plain.full_logits(x)
    expected = torch.nn.functional.cross_entropy(logits[:, 5:].reshape(-1, 65), y[:, 5:].reshape(-1))
    torch.testing.assert_close(plain.loss(x, y), expected)


def test_report_says_when_the_machine_was_busy():
    machine = {"cpu_cores": 2}
    assert report.busy_note({"machine": machine, "load_before": [0.3, 0.2, 0.1], "load_after": [0.5, 0.3, 0.2]}) is None
    note = report.busy_note({"machine": machine, "load_before": [0.3, 0.2, 0.1], "load_after": [2.5, 1.0, 0.5]})
    assert "busy" in note and "2.50 on 2 cores" in note


def test_readme_quotes_the_saved_results():
    """The numbers in README.md are the last full run's, with its machine: regenerate them, don't type them."""
    saved = [r for r in (report.load("cpu"), report.load("cuda")) if r]
    if not saved:
        pytest.skip("no full benchmark run saved in benchmarks/results/")
    block = report.README.read_text().split(report.START, 1)[1].split(report.END, 1)[0]
    for results in saved:
        assert report.readme_summary(results) in block, "run python -m benchmarks.report"
        assert report.where(results) in block  # the GPU for a CUDA run, the CPU for a CPU run


def test_update_readme_fills_the_block(tmp_path):
    results = {"device": "cpu", "quick": False, "date": "2026-01-01 00:00", "command": "python -m benchmarks",
               "machine": {"cpu": "Test CPU", "cpu_cores": 4, "torch_threads": 4, "torch": "2.x", "python": "3.x", "gpu": None},
               "load_before": [0.1, 0.1, 0.1], "load_after": [0.2, 0.1, 0.1], "seconds": 900.0,
               "convergence": {"steps": 2000, "val_loss": 1.85, "val_loss_200_batches": 1.86, "eval_steps": 20,
                               "seconds": 300.0, "target": 1.88, "passed": True, "passed_200_batches": True},
               "convergence_plain": {"steps": 2000, "val_loss": 1.86, "val_loss_200_batches": 1.87, "eval_steps": 20,
                                     "seconds": 290.0, "target": 1.88, "passed": True, "passed_200_batches": True},
               "gpu": {"skipped": "skipped: no CUDA device (the GPU section needs one)"}}
    (tmp_path / "cpu.json").write_text(json.dumps(results))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{report.START}\nold\n{report.END}\nrest\n")
    assert report.update_readme(readme, tmp_path)
    text = readme.read_text()
    assert "old" not in text and text.endswith(f"{report.END}\nrest\n")
    assert "**Test CPU (4 cores, 4 PyTorch threads)**" in text and "validation loss **1.850** on 20 batches" in text and "1.88; met" in text
    assert "trained the same way from the same weights, reached 1.860 and 1.870." in text
    readme.write_text("no markers")
    with pytest.raises(ValueError, match="has no block"):
        report.update_readme(readme, tmp_path)
    assert not report.update_readme(readme, tmp_path / "empty")


@pytest.mark.slow
def test_gpu_section_runs_on_stand_in_sizes(monkeypatch):
    """The GPU section's code path on the CPU (CI has no GPU): tiny stand-ins for GPT-2 small and
    shakespeare_char, a batch that "does not fit" until it is halved twice, the MFU from an H100's
    peak, the time to a target, and both reports of the result."""
    from dataclasses import replace

    from benchmarks import suite

    monkeypatch.setattr(suite, "GPT2_SMALL", replace(suite.GPT2_SMALL, n_layers=1, n_heads=2, d_model=32, n_ctx=32))
    monkeypatch.setattr(suite, "SHAKESPEARE_CHAR", replace(suite.BABY, name="shakespeare_char", n_layers=1, d_model=32,
                                                            n_ctx=32, batch=8))
    tried = []
    real_step = suite._gpt2_step

    def step_that_runs_out_of_memory(setting, opts, name):
        tried.append(setting.batch)
        if setting.batch > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 12.00 GiB")
        return real_step(setting, opts, name)

    monkeypatch.setattr(suite, "_gpt2_step", step_that_runs_out_of_memory)
    # the code path calls torch.compile; Inductor's C++ build of each graph would take minutes on the CPU
    # (tests/test_training.py compiles for real, tests/test_cuda.py on a GPU)
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real_compile(fn, **{**kw, "backend": "eager"}))
    log = []
    opts = suite.Options(device=torch.device("cpu"), repeats=2, warmup=1, min_run_seconds=0.01, gpu_batch=8,
                         gpu_target=3.5, log=log.append)
    g = suite.gpu_measurements(opts, "NVIDIA H100 80GB HBM3")

    assert tried == [8, 4, 2] and "batch 8 does not fit in memory; trying 4" in "\n".join(log)
    assert g["device"] == "NVIDIA H100 80GB HBM3" and g["peak_flops"] == 989e12 and g["dtype"] == "float32"
    assert "batch 2" in g["setting"] and g["vocab"] == "50257 padded to 50304"
    model = tl.GPT2(suite.GPT2_SMALL.gpt2_config(use_sdpa=True))
    assert g["flops_per_token"] == speed.model_flops_per_token(model, 32)
    assert g["tokens_per_s"] == pytest.approx(2 * 32 / (g["step_ms"] / 1e3))
    assert g["mfu"] == pytest.approx(g["tokens_per_s"] * g["flops_per_token"] / 989e12)
    assert len(g["runs_ms"]) == 2 and g["peak_memory_mib"] > 0 and g["compile_seconds"] > 0
    t = g["time_to_target"]
    assert t["target"] == 3.5 and t["reached"]["val_loss"] <= 3.5 and t["reached"]["step"] % 250 == 0

    results = {"device": "cuda", "quick": False, "date": "2026-01-01 00:00", "command": "python -m benchmarks",
               "machine": {"cpu": "Test CPU", "cpu_cores": 16, "torch_threads": 16, "torch": "2.x", "python": "3.x",
                           "gpu": "NVIDIA H100 80GB HBM3"},
               "load_before": [0.1, 0.1, 0.1], "load_after": [0.2, 0.1, 0.1], "seconds": 900.0, "gpu": g,
               "options": {"repeats": 2, "slow_step_seconds": 2.0, "warmup": 1, "min_run_seconds": 0.01}}
    table = report.markdown(results)
    assert f"| {g['step_ms']:.1f} | {g['tokens_per_s']:,.0f} |" in table and f"{g['mfu']:.1%}" in table
    assert f"reached at step {t['reached']['step']}" in table
    summary = report.readme_summary(results)
    assert "**NVIDIA H100 80GB HBM3**" in summary and f"MFU **{g['mfu']:.1%}**" in summary
