"""``python -m benchmarks``: measure the library's speed on this machine and print the tables.

    python -m benchmarks                  # everything (on a CPU: a quarter of an hour or more)
    python -m benchmarks --quick          # a smoke run on small sizes (about 20 s): checks the code paths
    python -m benchmarks --skip convergence --no-compile

Results go to ``benchmarks/results/<device>.json`` and ``.md`` (``quick-<device>`` for a quick run),
with the machine they were measured on and its load.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from transformer_lib import speed

from . import report, suite

SECTIONS = ("throughput", "generation", "convergence", "gpu")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes and few steps: a smoke run, no torch.compile")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto: CUDA if present, else the CPU")
    p.add_argument("--threads", type=int, default=None, help="PyTorch CPU threads (default: PyTorch's, one per core)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per figure; the median is reported (default 5, quick 3)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps before timing (default 2, quick 1)")
    p.add_argument("--compile", dest="compile", action="store_true", default=None, help="also measure torch.compile (default unless --quick)")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="skip the torch.compile variants")
    p.add_argument("--skip", action="append", default=[], choices=SECTIONS, help="leave out a section (repeatable)")
    p.add_argument("--convergence-steps", type=int, default=None, help="steps of the convergence run (default 2000)")
    p.add_argument("--gpu-batch", type=int, default=16, help="GPT-2 small batch (sequences of 1024 tokens) on a GPU")
    p.add_argument("--peak-flops", type=float, default=None, help="the GPU's dense bf16 peak FLOP/s, if not in the table")
    p.add_argument("--out", type=Path, default=report.RESULTS, help="folder for the JSON and Markdown results")
    args = p.parse_args(argv)
    for name in ("threads", "repeats", "warmup", "convergence_steps", "gpu_batch"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            p.error(f"--{name.replace('_', '-')} must be {'>= 0' if name == 'warmup' else '>= 1'}, got {value}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here")
    return args


def options(args: argparse.Namespace) -> suite.Options:
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    opts = suite.Options(device=device, gpu_batch=args.gpu_batch, gpu_peak_flops=args.peak_flops)
    if args.quick:
        # the baby model with fewer timed runs, a tiny one in place of shakespeare_char, short runs
        tiny = replace(suite.BABY, name="tiny", n_layers=2, d_model=64, batch=4, source="a smoke-test size")
        opts = replace(opts, quick=True, repeats=3, warmup=1, min_run_seconds=0.05, compile=False, settings=(suite.BABY, tiny),
                       new_tokens=32, generation_repeats=1, convergence_steps=30, convergence_target=None)
    opts = replace(opts, repeats=args.repeats or opts.repeats,
                   warmup=opts.warmup if args.warmup is None else args.warmup,
                   compile=opts.compile if args.compile is None else args.compile,
                   convergence_steps=args.convergence_steps or opts.convergence_steps)
    return opts


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    # the offline copy of Tiny Shakespeare beside the checkout, as conftest.py and scripts/offline-data.sh do
    data = Path(__file__).resolve().parents[2] / "shared" / "data"
    if data.is_dir():
        os.environ.setdefault("TFS_DATA_DIR", str(data))
    if args.threads:
        torch.set_num_threads(args.threads)
    opts = options(args)
    log = opts.log
    command = "python -m benchmarks" + ("" if not (argv if argv is not None else sys.argv[1:]) else
                                        " " + shlex.join(argv if argv is not None else sys.argv[1:]))
    results: dict = {
        "command": command, "date": time.strftime("%Y-%m-%d %H:%M"), "device": opts.device.type, "quick": opts.quick,
        "machine": speed.machine(), "load_before": speed.machine()["load_average"],
        "options": {k: v for k, v in asdict(opts).items() if k in ("repeats", "warmup", "min_run_seconds", "slow_step_seconds", "compile", "new_tokens")},
        "settings": {s.name: f"{s.describe()} ({s.source})" for s in opts.settings},
    }
    start = time.perf_counter()
    log(f"benchmarks on {opts.device.type}: {results['machine']['cpu']}, {results['machine']['torch_threads']} threads"
        + (f", {results['machine']['gpu']}" if opts.device.type == "cuda" else "")
        + f"; load average {results['load_before']}")
    # each section on its own: one that fails is recorded and the others still run and are saved
    sections = {"throughput": lambda: suite.throughput(opts), "generation": lambda: suite.generation(opts),
                "convergence": lambda: suite.convergence(opts), "gpu": lambda: suite.gpu(opts)}
    errors = {}
    for name, run in sections.items():
        if name in args.skip:
            continue
        log({"gpu": "GPU", "throughput": "training throughput"}.get(name, name))
        try:
            results[name] = run()
            if name == "convergence":
                # the yardstick on the same recipe, weights and batches: what the target means for nanoGPT's model.py
                results["convergence_plain"] = suite.convergence(opts, plain=True)
        except Exception as e:  # noqa: BLE001  (reported below and in the exit status)
            errors[name] = f"{type(e).__name__}: {e}"
            log(f"  {name} failed: {errors[name]}")
    if "throughput" in results and not opts.compile:
        results["compile_note"] = "skipped (--quick)" if opts.quick else "skipped (--no-compile)"
    if "skipped" in results.get("gpu", {}):
        log(f"  {results['gpu']['skipped']}")
    if errors:
        results["errors"] = errors
    results["load_after"] = speed.machine()["load_average"]
    results["seconds"] = time.perf_counter() - start
    json_path, md_path = report.write(results, args.out)
    print()
    print(report.markdown(results))
    log(f"written: {json_path} and {md_path} ({results['seconds']:.0f} s in all)")
    failed = results.get("convergence", {}).get("passed") is False
    same = all(r["same_tokens"] for r in results.get("generation", []))
    if failed or not same or errors:
        raise SystemExit("benchmark checks failed: " + ", ".join(
            x for x, bad in (("convergence target not met", failed), ("KV cache changed the tokens", not same),
                             (f"sections failed: {', '.join(errors)}", errors)) if bad))
    return results


if __name__ == "__main__":
    main()
