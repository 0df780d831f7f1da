"""scripts/gpu_run.sh, the one-command GPU run: its dry run here, its set-up checks, and the
kernel-less chapter runner it uses (scripts/measure_chapters.py --no-kernel)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("TFS_DATA_DIR") or ROOT.parent / "shared" / "data")
needs_data = pytest.mark.skipif(not (DATA / "tinyshakespeare.txt").exists(), reason="no offline data")
pytestmark = pytest.mark.slow  # every test runs a script


def gpu_run(tmp_path, *args, gpu_dir=None):
    env = dict(os.environ, PYTHON=sys.executable, TFS_GPU_DIR=str(gpu_dir or tmp_path / "gpu"), OUT="")
    return subprocess.run(["bash", "scripts/gpu_run.sh", "--out", str(tmp_path / "out"), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def gpu_dir(tmp_path):
    """What scripts/gpu_prepare.sh makes, without the wheels (this venv has the packages)."""
    folder = tmp_path / "gpu"
    (folder / "wheels").mkdir(parents=True)
    (folder / "data").mkdir()
    for name in ("tinyshakespeare.txt", "tiktoken-cache"):
        (folder / "data" / name).symlink_to(DATA / name)
    return folder


@needs_data
def test_dry_run_lists_every_step_and_skips_the_cuda_ones(tmp_path, gpu_dir):
    run = gpu_run(tmp_path, "--dry-run", gpu_dir=gpu_dir)
    assert run.returncode == 0, run.stdout + run.stderr
    for step, command in (("tests", "-m cuda tests/test_cuda.py"),
                          ("torchrun", "-m torch.distributed.run --standalone --nproc_per_node=1 "
                                       "scripts/torchrun_smoke.py --device cuda"),
                          ("benchmarks", "-m benchmarks --device cuda"),
                          ("chapters", "measure_chapters.py --no-kernel")):
        assert f"[skip] {step}:" in run.stdout and command in run.stdout
    assert run.stdout.count("skipped: no CUDA device here (dry run)") == 4
    assert "packages: " in run.stdout and "plotly" in run.stdout
    summary = json.loads((tmp_path / "out" / "gpu_run_summary.json").read_text())
    assert [s["step"] for s in summary] == ["tests", "torchrun", "benchmarks", "chapters"]
    assert {s["status"] for s in summary} == {"skipped"}


@needs_data
def test_without_a_gpu_the_real_run_refuses_and_says_why(tmp_path, gpu_dir):
    run = gpu_run(tmp_path, gpu_dir=gpu_dir)
    assert run.returncode == 2
    assert "no CUDA device" in run.stdout and "--dry-run" in run.stdout
    assert "stopped before the first step" in run.stdout


def test_missing_data_is_named_with_the_fix(tmp_path):
    run = gpu_run(tmp_path, "--dry-run")
    assert run.returncode == 2
    assert "tinyshakespeare.txt is missing: run scripts/gpu_prepare.sh" in run.stdout


def test_an_unknown_step_is_refused_with_the_list(tmp_path):
    run = gpu_run(tmp_path, "--dry-run", "--only", "bench")
    assert run.returncode == 2
    assert "no step 'bench'; the steps are tests, torchrun, benchmarks, chapters" in run.stderr


def test_the_torchrun_smoke_passes_on_two_cpu_processes(tmp_path):
    """The gpu_run step's script, as it runs there but on 2 CPU processes with gloo (no GPU here)."""
    out = tmp_path / "torchrun-cpu.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          "scripts/torchrun_smoke.py", "--device", "cpu", "--out", str(out)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "torchrun smoke: passed" in run.stdout
    results = json.loads(out.read_text())
    assert results["world_size"] == 2 and results["failures"] == []
    for kind in ("ddp", "fsdp"):
        entry = results["runs"][kind]
        assert entry["val_loss_last"] < entry["val_loss_first"] - 0.1  # it trained
        assert entry["resumed_vs_uninterrupted"] == 0  # bit for bit on a CPU
    assert results["ddp_vs_fsdp"] < results["tolerance"]


def test_the_torchrun_smoke_refuses_to_run_without_torchrun():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    run = subprocess.run([sys.executable, "scripts/torchrun_smoke.py", "--device", "cpu"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "run me under torchrun" in run.stdout


def notebook(path: Path, *cells: str, skip: int | None = None) -> Path:
    nb = {"cells": [{"cell_type": "code", "source": src, "metadata": {"tags": ["skip-execution"] if i == skip else []},
                     "outputs": [], "execution_count": None} for i, src in enumerate(cells)],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


def test_kernel_less_runner_runs_cells_reports_failures_and_goes_on(tmp_path):
    good = notebook(tmp_path / "good.ipynb",
                    "import plotly.graph_objects as go\nfig = go.Figure(go.Scatter(y=[1, 2]))\nfig.show()",
                    "raise RuntimeError('a skip-execution cell must not run')",
                    "from IPython.display import Markdown, display\ndisplay(Markdown('**done** ' + 'x' * 500))\n"
                    "x = 1\nx + 1", skip=1)
    bad = notebook(tmp_path / "bad.ipynb", "y = 1", "1 / 0", "print('never printed')")
    run = subprocess.run([sys.executable, "scripts/measure_chapters.py", "--no-kernel", "--output",
                          str(tmp_path / "m.json"), str(bad), str(good)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "ZeroDivisionError" in out and "bad.ipynb: cell 1 failed" in out and "never printed" not in out
    assert f"{bad}: FAILED (1)" in out and "failed: " + str(bad) in out
    assert "[figure: 1 trace(s)]" in out  # the figure went nowhere instead of failing without a frontend
    assert "a skip-execution cell must not run" not in out
    assert "**done** xxx" in out and " ..." in out  # long outputs are cut to one line
    assert "Out[2]: 2" in out  # the last expression of a cell, as a kernel shows it (cell 1 did not run)
