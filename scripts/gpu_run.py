"""Everything this project needs a GPU for, in one command: ``bash scripts/gpu_run.sh``.

    bash scripts/gpu_prepare.sh          # here, with the package registry: wheels + data into .gpu/
    bash scripts/gpu_run.sh --dry-run    # here: check what is found, list the steps
    bash scripts/gpu_run.sh              # on the GPU machine (about 9 minutes on an H100)

Made for an air-gapped GPU machine that has its own ``python3`` with a CUDA build of torch and no
package registry: the pure-Python packages the chapters need beyond it (plotly, ipywidgets, IPython)
travel as wheels in ``.gpu/wheels`` and the offline data in ``.gpu/data`` (both git-ignored,
made by ``scripts/gpu_prepare.sh``). Only what the machine lacks is installed, into ``.gpu/site``.

The steps, in order (``--only``/``--skip`` choose): the CUDA tests; a one-GPU ``torchrun`` smoke of
``TrainConfig(parallel="ddp")`` and ``"fsdp"`` (NCCL; ``scripts/torchrun_smoke.py``, which the CPU tests
run on two processes with gloo); ``python -m benchmarks --device cuda``; the training chapters
measured for the "large GPU" rows of ``measurements.json``. Each step
has a time limit and the whole run a budget (``--budget``); a step that fails or runs out of time is
reported and the next one runs. Results are written where the repository keeps them
(``benchmarks/results/cuda.*``, ``transformer_lib/measurements.json``) for a commit, and copied with
the log to ``--out`` (default: ``$OUT`` if set, else ``.gpu/out``).

Standard library only: it must start on a machine where nothing else is installed yet.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_DIR = Path(os.environ.get("TFS_GPU_DIR") or ROOT / ".gpu")  # the tests point it elsewhere
WHEELS, SITE, DATA = GPU_DIR / "wheels", GPU_DIR / "site", GPU_DIR / "data"
TORCH_FLOOR = (2, 5)  # pyproject.toml's torch>=2.5
# import name -> (distribution, floor): what the chapters import beyond torch
NEEDED = {
    "numpy": ("numpy", (1, 23)), "einops": ("einops", (0, 6)), "tqdm": ("tqdm", (4, 60)),
    "tiktoken": ("tiktoken", (0, 6)), "plotly": ("plotly", (5, 24)), "ipywidgets": ("ipywidgets", (7, 7)),
    "IPython": ("ipython", (8, 0)), "safetensors": ("safetensors", (0, 4)), "onnx": ("onnx", (1, 16)),
    "onnxscript": ("onnxscript", (0, 3)), "onnxruntime": ("onnxruntime", (1, 17)),
    "transformers": ("transformers", (4, 40)), "pytest": ("pytest", (7, 0)),
}
CHAPTERS = ["book/06_weight_tying.ipynb", "book/09_transformer.ipynb", "book/10_putting_it_together.ipynb",
            "book/08_bert.ipynb", "book/07_gpt2.ipynb"]  # the shortest first: the budget may end mid-list


@dataclass
class Step:
    name: str
    what: str
    command: list[str]
    limit: float  # seconds
    needs_cuda: bool = True
    results: list[Path] = field(default_factory=list)  # files this step writes, copied to --out


def steps(python: str, chapters: list[str] = CHAPTERS) -> list[Step]:
    return [
        Step("tests", "the tests marked cuda (tests/test_cuda.py)",
             [python, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider", "-m", "cuda",
              "tests/test_cuda.py"], 120),
        Step("torchrun", "torchrun, one process on the GPU: tl.train with parallel='ddp' and 'fsdp' (NCCL) against "
             "one process, and resumed from a checkpoint (scripts/torchrun_smoke.py)",
             [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", "scripts/torchrun_smoke.py",
              "--device", "cuda", "--out", "benchmarks/results/torchrun-cuda.json"], 150,
             results=[ROOT / "benchmarks/results/torchrun-cuda.json"]),
        Step("benchmarks", "python -m benchmarks --device cuda (GPT-2 small MFU, shakespeare_char to 1.47; "
             "eager throughput, generation and convergence at the CPU sizes)",
             [python, "-m", "benchmarks", "--device", "cuda", "--no-compile"], 330,
             results=[ROOT / "benchmarks/results/cuda.json", ROOT / "benchmarks/results/cuda.md"]),
        Step("chapters", "chapters 6-10 top to bottom at their GPU sizes, recorded as 'large GPU'",
             [python, "scripts/measure_chapters.py", "--no-kernel", "--timeout", "240", *chapters], 480,
             results=[ROOT / "transformer_lib/measurements.json"]),
    ]


def version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text.split("+")[0])[:2])


def probe(python: str, code: str, env: dict, *args: str) -> str:
    """What ``python -c code args`` prints, or "" if it fails."""
    out = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, env=env)
    return out.stdout.strip() if out.returncode == 0 else ""


def top_level(wheel: Path) -> set[str]:
    """The modules a wheel installs (its top-level folders and .py files)."""
    with zipfile.ZipFile(wheel) as z:
        names = {n.split("/")[0] for n in z.namelist()}
    return {n.removesuffix(".py") for n in names if not n.endswith((".dist-info", ".data", ".pth"))}


def install_missing(python: str, env: dict, log) -> list[str]:
    """Install the wheels in .gpu/wheels whose modules this python lacks into .gpu/site."""
    wheels = sorted(WHEELS.glob("*.whl")) if WHEELS.is_dir() else []
    check = "import importlib.util as u, sys; print(all(u.find_spec(m) for m in sys.argv[1:]))"
    missing = [w for w in wheels if probe(python, check, env, *sorted(top_level(w))) != "True"]
    if missing:
        SITE.mkdir(parents=True, exist_ok=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--disable-pip-version-check", "--upgrade", "--target", str(SITE), *map(str, missing)],
                       check=True, env=env)
        log(f"installed into .gpu/site: {', '.join(w.name.split('-')[0] for w in missing)}")
    return [w.name for w in missing]


def preflight(python: str, env: dict, dry_run: bool, log) -> tuple[bool, list[str]]:
    """Check the interpreter, torch, CUDA, the packages and the data; (cuda available, problems)."""
    problems = []
    py = probe(python, "import sys; print('%d.%d' % sys.version_info[:2])", env)
    log(f"python: {python} ({py or 'does not run'})")
    if not py or version(py) < (3, 10):
        problems.append(f"{python} must be Python >= 3.10 (found {py or 'nothing'})")
    torch_info = probe(python, "import torch; print(torch.__version__, torch.cuda.is_available(), "
                       "torch.cuda.get_device_name() if torch.cuda.is_available() else '-', sep='|')", env)
    if not torch_info:
        problems.append(f"{python} cannot import torch: install a CUDA build of torch >= 2.5")
        return False, problems
    torch_version, cuda, gpu = torch_info.split("|")
    log(f"torch {torch_version}; CUDA: {cuda == 'True'}{f' ({gpu})' if cuda == 'True' else ''}")
    if version(torch_version) < TORCH_FLOOR:
        problems.append(f"torch {torch_version} is older than the library's floor 2.5")
    if cuda != "True" and not dry_run:
        problems.append("no CUDA device: run on a GPU machine, or pass --dry-run to check the set-up here")
    try:
        install_missing(python, env, log)
    except subprocess.CalledProcessError as e:
        problems.append(f"installing the wheels from .gpu/wheels failed ({e})")
    versions = ("import importlib.metadata as m, importlib.util as u, json, sys\n"
                "need = json.loads(sys.argv[1])\n"
                "print(json.dumps({d: m.version(d) for mod, d in need.items() if u.find_spec(mod)}))")
    found = probe(python, versions, env, json.dumps({k: v[0] for k, v in NEEDED.items()}))
    have = json.loads(found or "{}")
    for module, (dist, floor) in NEEDED.items():
        if dist not in have:
            problems.append(f"{dist} is missing (import {module}): run scripts/gpu_prepare.sh where pip works, "
                            "and bring .gpu/ along")
        elif version(have[dist]) < floor:
            problems.append(f"{dist} {have[dist]} is older than {'.'.join(map(str, floor))}")
    log("packages: " + ", ".join(f"{d} {v}" for d, v in sorted(have.items())))
    for path in (DATA / "tinyshakespeare.txt", DATA / "tiktoken-cache"):
        if not path.exists():
            problems.append(f"{path} is missing: run scripts/gpu_prepare.sh")
    return cuda == "True", problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bash scripts/gpu_run.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="check the set-up and list the steps; run none that needs CUDA")
    p.add_argument("--only", action="append", default=[], help="run only this step (repeatable)")
    p.add_argument("--skip", action="append", default=[], help="leave out this step (repeatable)")
    p.add_argument("--budget", type=float, default=540, help="seconds for all steps together (default 540)")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or GPU_DIR / "out"),
                   help="folder for the log and a copy of the results (default: $OUT, else .gpu/out)")
    p.add_argument("--chapter", action="append", default=[], help="the chapters step runs only this notebook "
                   "(repeatable; default: chapters 6-10)")
    p.add_argument("--python", default=os.environ.get("PYTHON", "python3"), help="the interpreter with CUDA torch")
    args = p.parse_args(argv)
    plan = steps(args.python, args.chapter or CHAPTERS)
    names = [s.name for s in plan]
    for chosen in args.only + args.skip:
        if chosen not in names:
            p.error(f"no step {chosen!r}; the steps are {', '.join(names)}")
    plan = [s for s in plan if (not args.only or s.name in args.only) and s.name not in args.skip]

    args.out.mkdir(parents=True, exist_ok=True)
    log_file = (args.out / "gpu_run.log").open("a", encoding="utf-8")

    def log(line: str) -> None:
        print(line, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    env = dict(os.environ, PYTHONUNBUFFERED="1", TFS_DATA_DIR=str(DATA), TIKTOKEN_CACHE_DIR=str(DATA / "tiktoken-cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(SITE), *filter(None, [os.environ.get("PYTHONPATH")])])
    log(f"gpu_run {'(dry run) ' if args.dry_run else ''}{time.strftime('%Y-%m-%d %H:%M:%S')} in {ROOT}")
    cuda, problems = preflight(args.python, env, args.dry_run, log)
    if problems:
        for problem in problems:
            log(f"set-up problem: {problem}")
        log("stopped before the first step")
        return 2

    summary, deadline = [], time.monotonic() + args.budget
    for step in plan:
        shown = " ".join(step.command)
        if step.needs_cuda and not cuda:
            log(f"[skip] {step.name}: {step.what}\n       {shown}\n       skipped: no CUDA device here (dry run)")
            summary.append({"step": step.name, "status": "skipped", "reason": "no CUDA device (dry run)"})
            continue
        if args.dry_run:
            log(f"[dry run] {step.name}: {step.what}\n       {shown}")
            summary.append({"step": step.name, "status": "listed"})
            continue
        left = deadline - time.monotonic()
        if left < 30:
            log(f"[skip] {step.name}: the budget of {args.budget:.0f} s is spent")
            summary.append({"step": step.name, "status": "skipped", "reason": "budget spent"})
            continue
        limit = min(step.limit, left)
        log(f"[run] {step.name}: {step.what} (limit {limit:.0f} s)\n       {shown}")
        start = time.monotonic()
        with subprocess.Popen(step.command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, bufsize=1, start_new_session=True) as proc:
            try:
                for line in proc.stdout:  # the step's output, live and in the log
                    log("  " + line.rstrip("\n"))
                    if time.monotonic() - start > limit:
                        raise subprocess.TimeoutExpired(step.command, limit)
                code = proc.wait(timeout=max(1, limit - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                code = f"stopped at its limit of {limit:.0f} s"
        seconds = time.monotonic() - start
        status = "passed" if code == 0 else "failed"
        log(f"[{status}] {step.name} in {seconds:.0f} s" + ("" if code == 0 else f" ({code})"))
        summary.append({"step": step.name, "status": status, "seconds": round(seconds, 1),
                        **({} if code == 0 else {"exit": str(code)})})
        for path in step.results:
            if path.exists():
                shutil.copy2(path, args.out / path.name)
    (args.out / "gpu_run_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    log("summary: " + "; ".join(f"{s['step']} {s['status']}" for s in summary))
    return 0 if all(s["status"] in ("passed", "listed", "skipped") and s.get("reason") != "budget spent"
                    for s in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
