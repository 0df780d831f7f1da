"""Execute the chapters into the book's execution cache, one notebook per CPU core, before the build.

    .venv/bin/python scripts/execute_book.py [--jobs N]     # scripts/setup.sh runs it before the build

Jupyter Book 1 executes the notebooks one after another while it reads them. The chapters compute
on one thread each (``tl.set_cpu_threads``), so on the 2-core CI machine half of it waited. This
runs every chapter the cache does not hold yet, longest first (``CPU_SECONDS`` in ``conftest.py``),
N at a time, with the build's own settings (``_config.yml``: the timeout per cell, no errors
allowed, the notebook's folder as working directory) into ``_build/.jupyter_cache``, where the
build finds them ("Using cached notebook"). The chapters export their trained models for the live
panels where the build's extension (``book/_ext/live_models.py``) tells them to, ``_build/browser_models``.
A chapter that fails here is not cached: the build runs it again and fails with its traceback, as
it always did.
"""

import argparse
import importlib.util
import logging
import multiprocessing
import os
import sys
import time
from pathlib import Path

import yaml
from jupyter_cache import get_cache
from jupyter_cache.executors.basic import ExecutionWorkerLocalMProc, ProcessData

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from transformer_lib.export import EXPORT_DIR_VARIABLE  # noqa: E402


def chapters() -> list[Path]:
    """The notebooks in _toc.yml, longest-running first."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [e["file"] for part in toc.get("parts", [toc]) for e in part.get("chapters", [])]
    notebooks = [ROOT / f"{f}.ipynb" for f in files if (ROOT / f"{f}.ipynb").exists()]
    seconds = budgets()
    return sorted(notebooks, key=lambda p: -seconds.CPU_SECONDS.get(seconds.chapter(p.name) or 0, 0))


def budgets():
    """conftest.py, which holds each chapter's CPU seconds (``CPU_SECONDS``, ``chapter``)."""
    spec = importlib.util.spec_from_file_location("book_budgets", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="these only (default: the book's)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="notebooks at a time")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    missing = [str(p) for p in args.notebooks if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]
    # as the build sets it (book/_ext/live_models.py): the kernels inherit it and export there
    os.environ.setdefault(EXPORT_DIR_VARIABLE, str((ROOT / "_build" / "browser_models").resolve()))
    cache = get_cache(str(ROOT / "_build" / ".jupyter_cache"))
    todo = []
    for path in [p.resolve() for p in args.notebooks if p.suffix == ".ipynb"] or chapters():
        record = cache.add_nb_to_project(str(path))
        try:
            cache.match_cache_notebook(cache.get_project_notebook(record.pk).nb)
        except KeyError:
            todo.append(record)
    print(f"execute_book: {len(todo)} notebook(s) to execute, {args.jobs} at a time", flush=True)
    start = time.monotonic()
    work = [ProcessData(r.pk, r.uri, cache, config.get("timeout", 30), config.get("allow_errors", False))
            for r in todo]
    multiprocessing.log_to_stderr(logging.WARNING)  # a notebook that fails says so here
    with multiprocessing.Pool(max(1, min(args.jobs, len(work) or 1))) as pool:
        # one notebook per task, in the order given: the long chapters start first
        results = list(pool.imap_unordered(ExecutionWorkerLocalMProc(), work, chunksize=1))
    failed = [uri for status, uri in results if status != 0]
    print(f"execute_book: {len(results) - len(failed)} executed and cached in "
          f"{time.monotonic() - start:.0f} s" + (f"; failed (the build shows why): {failed}" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
