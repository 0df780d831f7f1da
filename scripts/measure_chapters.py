"""Run the training chapters top to bottom and record what they measured on this hardware.

    .venv/bin/python scripts/measure_chapters.py                 # chapters 6-10, in a Jupyter kernel
    .venv/bin/python scripts/measure_chapters.py book/07_gpt2.ipynb
    python3 scripts/measure_chapters.py --no-kernel              # no Jupyter: IPython in a subprocess

Each training chapter calls ``tl.measurements.record(...)`` after it trains; with
``TFS_RECORD_MEASUREMENTS`` set (this script sets it) that writes the chapter's losses and training
time for this hardware kind (CPU, Colab T4, large GPU) into ``transformer_lib/measurements.json``,
the table the chapters show under "What to expect on other hardware". Run it on a quiet machine:
the times measure the machine's load as much as the model. On Colab, run it from a clone of the
repository (``!git clone ... && cd ... && pip install -e .[book] && python scripts/measure_chapters.py``)
and commit the updated JSON.

``--no-kernel`` is for a machine without Jupyter (``scripts/gpu_run.sh``): each chapter runs in a
fresh Python process through IPython's shell (``display``, ``!`` and ``%`` work as in a kernel), with
the ``skip-execution`` cells left out as nbval leaves them out. A failing chapter is reported and
the next one runs; the exit status says whether all of them passed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "book").glob("*.ipynb")
                 if "tl.measurements.record(" in p.read_text(encoding="utf-8"))
SKIP_TAG = "skip-execution"  # nbval and the book's build leave these cells out too


def code_cells(path: Path) -> list[tuple[int, str]]:
    """``(index, source)`` of the cells a run executes: code cells not tagged ``skip-execution``."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells)
            if c["cell_type"] == "code" and SKIP_TAG not in c.get("metadata", {}).get("tags", [])]


def quiet_displays(shell, width: int = 200) -> None:
    """No frontend draws here: figures go nowhere and each output is logged as one short line.

    plotly's own renderers need a frontend (and nbformat) to hand figures to; an external
    renderer that draws nothing keeps ``fig.show()`` working. The book's build and nbval, not this
    run, check what the figures look like.
    """
    try:
        import plotly.io as pio
        from plotly.io._base_renderers import ExternalRenderer

        import transformer_lib.viz  # noqa: F401  (sets its renderer on import; ours replaces it)
    except ImportError:
        pass
    else:
        class Nowhere(ExternalRenderer):
            def render(self, fig_dict):
                print(f"[figure: {len(fig_dict.get('data', []))} trace(s)]")

        pio.renderers["nowhere"] = Nowhere()
        pio.renderers.default = "nowhere"

    def one_line(data, *args, **kwargs):
        text = (data.get("text/markdown") or data.get("text/plain") or f"[{', '.join(data)}]") if isinstance(data, dict) else str(data)
        text = " ".join(str(text).split())
        print(text[:width] + (" ..." if len(text) > width else ""))

    shell.display_pub.publish = one_line
    shell.displayhook.write_format_data = lambda data, md=None: one_line(data)


def run_in_shell(path: Path) -> int:
    """Execute ``path``'s code cells in this process with IPython's shell; 1 at the first failure."""
    from IPython.core.interactiveshell import InteractiveShell

    os.chdir(path.parent)  # where nbval and the book run a chapter
    shell = InteractiveShell.instance(colors="nocolor")
    quiet_displays(shell)
    for index, source in code_cells(path):
        result = shell.run_cell(source, store_history=True)
        if not result.success:
            print(f"{path.name}: cell {index} failed (its traceback is above)", file=sys.stderr)
            return 1
    return 0


def run_in_kernel(path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=1800, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", default=DEFAULT, help="chapters to run (default: every training chapter)")
    parser.add_argument("--output", default=str(ROOT / "transformer_lib" / "measurements.json"),
                        help="the JSON file to update (default: the one the library ships)")
    parser.add_argument("--no-kernel", action="store_true",
                        help="run each chapter with IPython in a subprocess instead of a Jupyter kernel")
    parser.add_argument("--timeout", type=float, default=None,
                        help="--no-kernel: seconds a chapter may take before it is stopped")
    parser.add_argument("--run-one", help=argparse.SUPPRESS)  # the subprocess of --no-kernel
    args = parser.parse_args(argv)
    if args.run_one:
        return run_in_shell(Path(args.run_one).resolve())
    os.environ["TFS_RECORD_MEASUREMENTS"] = str(Path(args.output).resolve())  # the kernels inherit it
    failed = []
    for path in args.notebooks:
        start = time.perf_counter()
        if args.no_kernel:
            try:
                code = subprocess.run([sys.executable, __file__, "--run-one", str(ROOT / path)],
                                      timeout=args.timeout).returncode
            except subprocess.TimeoutExpired:
                code = f"stopped after {args.timeout:.0f} s"
            if code != 0:
                failed.append(path)
                print(f"{path}: FAILED ({code}) after {time.perf_counter() - start:.0f} s", flush=True)
                continue
        else:
            run_in_kernel(ROOT / path)
        load = f"; load average {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
        print(f"{path}: ran in {time.perf_counter() - start:.0f} s{load}", flush=True)
    print(f"updated {args.output}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
