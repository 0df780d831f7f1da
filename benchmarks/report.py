"""The results of ``python -m benchmarks`` as Markdown tables, and the files they are kept in."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def busy_note(results: dict) -> str | None:
    """A warning when other programs were using the CPU during the run (the 1-minute load average)."""
    machine = results["machine"]
    loads = [x[0] for x in (results.get("load_before"), results.get("load_after")) if x]
    cores = machine.get("cpu_cores") or 1
    if loads and max(loads) > 0.5 * cores:
        return (f"**The machine was busy**: its 1-minute load average was {max(loads):.2f} on {cores} cores during the run "
                f"(other programs were using the CPU), so absolute figures are lower and noisier than on an idle "
                f"machine. Ratios compare variants timed alternately in the same run.")
    return None


def where(results: dict) -> str:
    """The machine a run measured: the GPU, or the CPU with its cores and PyTorch threads."""
    m = results["machine"]
    if results["device"] == "cuda":
        return m["gpu"]
    return f"{m['cpu']} ({m['cpu_cores']} cores, {m['torch_threads']} PyTorch thread{'s' if m['torch_threads'] != 1 else ''})"


def _num(x: float | None, fmt: str = ",.0f") -> str:
    return "" if x is None else format(x, fmt)


def markdown(results: dict) -> str:
    m = results["machine"]
    device = where(results)
    lines = [
        f"# Benchmark results: {results['device']}{' (quick run)' if results['quick'] else ''}",
        "",
        f"Measured {results['date']} with `{results['command']}` on **{device}**, torch {m['torch']}, "
        f"Python {m['python']}. Load average (1, 5, 15 min) before: {results['load_before']}, after: {results['load_after']}. "
        f"Each figure is the median of {results['options']['repeats']} timed runs (*runs*: fewer for steps slower than "
        f"{results['options']['slow_step_seconds']} s) after {results['options']['warmup']} warm-up step(s); a timed run "
        f"repeats the step until it lasts about {results['options']['min_run_seconds']} s.",
    ]
    note = busy_note(results)
    if note:
        lines += ["", note]
    settings = results.get("settings", {})
    if settings:
        lines += ["", "Settings: " + "; ".join(f"**{k}**: {v}" for k, v in settings.items()) + "."]

    if "throughput" in results:
        rows = results["throughput"]
        compiled = any(r["compiled"] for r in rows)
        lines += ["", "## Training throughput", "",
                  "Tokens per second of a whole training step (forward, backward, clipping, fused AdamW), random tokens. "
                  "*explicit*: the library with attention, activation and norms written out (what the chapters read); "
                  "*fast*: the library on `tl.fast_path` (`F.scaled_dot_product_attention`, one-kernel GELU and "
                  "LayerNorm); *nanoGPT*: the yardstick, our op-for-op re-implementation of nanoGPT's `model.py` code path with the same weights "
                  "(`benchmarks/reference.py`: one fused QKV projection, `F.scaled_dot_product_attention(is_causal=True)`, "
                  "no value read back during the step). Ratios are to the explicit path of the same run.", ""]
        head = "| setting | attention | eager tokens/s | ms/step | runs | vs explicit | peak memory (MiB) |"
        sep = "|---|---|---:|---:|---:|---:|---:|"
        if compiled:
            head += " compiled tokens/s | vs explicit | compiled vs eager |"
            sep += "---:|---:|---:|"
        lines += [head, sep]
        for r in (r for r in rows if not r["compiled"]):
            line = (f"| {r['setting']} | {r['attention']} | {_num(r['tokens_per_s'])} | {_num(r['step_ms'], '.1f')} | "
                    f"{len(r['runs_ms'])} | {r['vs_explicit']:.2f}x | {_num(r['peak_memory_mib'], '.1f')} |")
            if compiled:
                c = next((x for x in rows if x["compiled"] and x["setting"] == r["setting"] and x["attention"] == r["attention"]), None)
                line += (f" {_num(c['tokens_per_s'])} | {c['vs_explicit']:.2f}x | {c['vs_eager']:.2f}x |" if c else " | | |")
            lines.append(line)
        if not compiled:
            lines += ["", f"torch.compile: {results.get('compile_note', 'not measured')}."]

    if "generation" in results:
        lines += ["", "## Generation", "", "Greedy decoding of new tokens from a one-token prompt, untrained model "
                  "(fast path). *same tokens*: with and without the cache, the outputs are identical.", "",
                  "| setting | context | new tokens | with KV cache (tokens/s) | without (tokens/s) | speed-up | same tokens |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for r in results["generation"]:
            slide = " (window slides)" if r["window_slides"] else ""
            lines.append(f"| {r['setting']} | {r['context']}{slide} | {r['new_tokens']} | {_num(r['with_cache_tokens_per_s'])} | "
                         f"{_num(r['without_cache_tokens_per_s'])} | {r['speedup']:.1f}x | {'yes' if r['same_tokens'] else '**no**'} |")
        if any(r["window_slides"] for r in results["generation"]):
            lines += ["", "Where the text outgrows the context window, positions shift at every step and the cache is "
                      "rebuilt from the window each step, so it saves little there."]

    if "convergence" in results:
        c = results["convergence"]
        runs = [c] + ([results["convergence_plain"]] if "convergence_plain" in results else [])

        def verdict(r: dict) -> str:
            if r.get("passed") is None:
                return "not checked (quick run)"
            return (("**met**" if r["passed"] else "**not met**") + f" as nanoGPT measures it ({r['eval_steps']} batches); "
                    + ("also" if r["passed_200_batches"] else "not") + " on 200 batches")

        lines += ["", "## Convergence", "",
                  f"The {c['setting']} model on Tiny Shakespeare (90/10 split), nanoGPT's recipe: {c['steps']} steps, lr 1e-3, "
                  f"{c['warmup_steps']} warm-up steps, cosine to 1e-4, AdamW betas (0.9, 0.99), weight decay 0.1, clipping "
                  f"at 1, no biases, exact GELU, fused AdamW. *library*: `tl.GPT2` on the fast path; *nanoGPT*: our re-implementation of "
                  f"nanoGPT's `model.py` (`benchmarks/reference.py`), from the same initial weights on the same batches. nanoGPT's README "
                  f"reports \"a loss of only 1.88\" without saying which; we read it as the validation loss on its `eval_iters=20` batches "
                  f"at the last step. The 200-batch estimate is steadier.", "",
                  "| model | steps | training time | validation loss (%d batches, as nanoGPT) | validation loss (200 batches) "
                  "| target | |" % c["eval_steps"],
                  "|---|---:|---:|---:|---:|---:|---|"]
        lines += [f"| {r.get('model', 'library')} | {r['steps']} | {r['seconds']:.0f} s | {r['val_loss']:.4f} | "
                  f"{r['val_loss_200_batches']:.4f} | {_num(r['target'], '.2f')} | {verdict(r)} |" for r in runs]

    if "gpu" in results:
        g = results["gpu"]
        lines += ["", "## GPU", ""]
        if "skipped" in g:
            lines.append(g["skipped"][0].upper() + g["skipped"][1:] + ".")
        else:
            mfu = "peak unknown" if g["mfu"] is None else f"{g['mfu']:.1%}"
            lines += [f"GPT-2 small on {g['device']}: {g['setting']}, vocabulary {g['vocab']}, {g['dtype']}, the "
                      f"fast path, torch.compile, fused AdamW. MFU = tokens/s x (6N + 12 L H d_head T) / peak "
                      f"({_num(g['peak_flops'], '.3g')} FLOP/s).", "",
                      "| ms/step | tokens/s | FLOPs/token | MFU | peak memory (MiB) | compile time |",
                      "|---:|---:|---:|---:|---:|---:|",
                      f"| {g['step_ms']:.1f} | {_num(g['tokens_per_s'])} | {g['flops_per_token']:.3g} | {mfu} | "
                      f"{g['peak_memory_mib']:.0f} | {g['compile_seconds']:.0f} s |"]
            t = g["time_to_target"]
            reached = t.get("reached")
            lines += ["", f"shakespeare_char to validation loss {t['target']}: "
                      + (f"reached at step {reached['step']} after {reached['seconds']:.0f} s (val loss {reached['val_loss']:.4f})."
                         if reached else f"not reached in {t['steps']} steps ({t['seconds']:.0f} s; final {t['val_loss']:.4f}).")]
    for name, error in results.get("errors", {}).items():
        lines += ["", f"**The {name} section failed**: `{error}`"]
    return "\n".join(lines) + "\n"


def write(results: dict, out: Path) -> tuple[Path, Path]:
    """``<out>/<name>.json`` and ``<out>/<name>.md``; name: ``cpu`` or ``cuda``, prefixed ``quick-`` for a quick run."""
    out.mkdir(parents=True, exist_ok=True)
    name = ("quick-" if results["quick"] else "") + results["device"]
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    md_path.write_text(markdown(results))
    return json_path, md_path


def load(device: str = "cpu", folder: Path = RESULTS) -> dict | None:
    """The results of the last full run on ``device`` (``cpu`` or ``cuda``), or None."""
    path = folder / f"{device}.json"
    return json.loads(path.read_text()) if path.exists() else None


# ------------------------------------------------------------------------------------- README.md

README = RESULTS.parents[1] / "README.md"
START, END = "<!-- benchmark results: generated by python -m benchmarks.report -->", "<!-- end of benchmark results -->"


def readme_summary(results: dict) -> str:
    """The README's summary of a full run: the machine, throughput, the KV cache, convergence."""
    m = results["machine"]
    lines = [f"Last full run: {results['date']}, `{results['command']}` on **{where(results)}**, torch {m['torch']}, load average "
             f"{results['load_before'][0]:.2f} before and {results['load_after'][0]:.2f} after "
             f"([`benchmarks/results/{results['device']}.md`](benchmarks/results/{results['device']}.md) has every figure; "
             f"the whole run took {results['seconds'] / 60:.0f} minutes)."]
    note = busy_note(results)
    if note:
        lines += ["", note]
    rows = results.get("throughput", [])
    if rows:
        get = {(r["setting"], r["attention"], r["compiled"]): r for r in rows}
        compiled = any(r["compiled"] for r in rows)
        lines += ["", "| training tokens/s | written out | fast path | nanoGPT's model.py | fast vs written out "
                  "| fast vs nanoGPT |" + (" fast path, compiled |" if compiled else ""),
                  "|---|---:|---:|---:|---:|---:|" + ("---:|" if compiled else "")]
        for setting in dict.fromkeys(r["setting"] for r in rows):
            e, f, p = (get.get((setting, a, False)) for a in ("explicit", "fast", "nanoGPT"))
            line = (f"| {setting} | {e['tokens_per_s']:,.0f} | {f['tokens_per_s']:,.0f} | "
                    f"{_num(p and p['tokens_per_s'])} | {f['vs_explicit']:.2f}x | "
                    f"{'' if not p else format(f['tokens_per_s'] / p['tokens_per_s'], '.2f') + 'x'} |")
            if compiled:
                c = get.get((setting, "fast", True))
                line += f" {_num(c and c['tokens_per_s'])} |"
            lines.append(line)
    gen = [g for g in results.get("generation", []) if not g["window_slides"]]
    if gen:
        g = gen[-1]
        lines += ["", f"KV cache: greedy generation of {g['new_tokens']} tokens at the {g['setting']} size is "
                  f"{g['speedup']:.1f}x as fast with the cache ({g['with_cache_tokens_per_s']:,.0f} vs "
                  f"{g['without_cache_tokens_per_s']:,.0f} tokens/s), with identical tokens: "
                  f"{'yes' if g['same_tokens'] else 'NO'}."]
    c = results.get("convergence")
    if c and c.get("passed") is not None:
        lines += ["", f"Convergence: nanoGPT's CPU run ({c['steps']} steps) reached validation loss "
                  f"**{c['val_loss']:.3f}** on {c['eval_steps']} batches, as nanoGPT measures it (its published figure: "
                  f"{c['target']:.2f}; {'met' if c['passed'] else 'NOT met'}), and {c['val_loss_200_batches']:.3f} on 200 "
                  f"batches ({'also below' if c['passed_200_batches'] else 'above'} {c['target']:.2f}), in "
                  f"{c['seconds'] / 60:.1f} minutes."]
        p = results.get("convergence_plain")
        if p:
            lines[-1] += (f" Our re-implementation of nanoGPT's model.py, trained the same way from the same weights, reached "
                          f"{p['val_loss']:.3f} and {p['val_loss_200_batches']:.3f}.")
    gpu = results.get("gpu")
    if gpu and "skipped" in gpu:
        lines += ["", f"GPU section: {gpu['skipped']}."]
    elif gpu:
        reached = gpu["time_to_target"].get("reached")
        mfu = "unknown (no peak for this GPU)" if gpu["mfu"] is None else f"**{gpu['mfu']:.1%}**"
        lines += ["", f"GPT-2 small ({gpu['setting']}), {gpu['dtype']}, fast path, compiled: {gpu['step_ms']:.1f} ms per "
                  f"step, {gpu['tokens_per_s']:,.0f} tokens/s, MFU {mfu}. shakespeare_char reached validation loss "
                  f"{gpu['time_to_target']['target']}: "
                  + (f"at step {reached['step']}, after {reached['seconds']:.0f} s." if reached else "not within its steps.")]
    return "\n".join(lines)


def update_readme(readme: Path = README, folder: Path = RESULTS) -> bool:
    """Rewrite the README's block between the markers from the saved results; False if there are none."""
    blocks = [readme_summary(r) for r in (load(d, folder) for d in ("cpu", "cuda")) if r]
    if not blocks:
        return False
    text = readme.read_text()
    if START not in text or END not in text:
        raise ValueError(f"{readme} has no block {START} ... {END} to fill")
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    readme.write_text(head + START + "\n" + "\n\n".join(blocks) + "\n" + END + tail)
    return True


if __name__ == "__main__":  # python -m benchmarks.report: the README's block from benchmarks/results/
    print("README.md updated" if update_readme() else "no results in benchmarks/results/: run python -m benchmarks first")
