"""scripts/execute_book.py: the chapters executed a core each into the build's cache, before the build."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("execute_book", ROOT / "scripts" / "execute_book.py")
execute_book = importlib.util.module_from_spec(spec)
spec.loader.exec_module(execute_book)


def test_every_chapter_of_the_toc_longest_first():
    found = execute_book.chapters()
    assert sorted(p.name for p in found) == sorted(p.name for p in (ROOT / "book").glob("[0-9]*.ipynb"))
    budgets = execute_book.budgets()
    seconds = [budgets.CPU_SECONDS[budgets.chapter(p.name)] for p in found]
    assert seconds == sorted(seconds, reverse=True), "the long chapters must start first"


@pytest.mark.slow  # starts a kernel (a few seconds)
def test_a_notebook_is_cached_as_the_build_reads_it_and_exports_where_the_build_looks(tmp_path):
    """The build (myst-nb) finds the execution in _build/.jupyter_cache; a kernel sees TFS_BROWSER_MODELS."""
    from jupyter_cache import get_cache

    book = tmp_path / "book"
    book.mkdir()
    for name in ("_config.yml", "_toc.yml", "conftest.py"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "execute_book.py").write_text((ROOT / "scripts" / "execute_book.py").read_text())
    (tmp_path / "transformer_lib").symlink_to(ROOT / "transformer_lib")
    code = ("import os, pathlib\n"
            "p = pathlib.Path(os.environ['TFS_BROWSER_MODELS']) / 'probe'\n"
            "p.mkdir(parents=True)\n"
            "print(p)")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = book / "99_probe.ipynb"
    nbformat.write(nb, path)
    env = {k: v for k, v in os.environ.items() if k != "TFS_BROWSER_MODELS"}
    run = subprocess.run([sys.executable, "scripts/execute_book.py", str(path)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "1 executed and cached" in run.stdout, run.stdout + run.stderr[-2000:]
    assert (tmp_path / "_build" / "browser_models" / "probe").is_dir()
    cache = get_cache(str(tmp_path / "_build" / ".jupyter_cache"))
    as_the_build_reads_it = nbformat.reads(path.read_text(), as_version=4)  # myst_nb.core.read
    assert cache.match_cache_notebook(as_the_build_reads_it) is not None
    again = subprocess.run([sys.executable, "scripts/execute_book.py", str(path)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    assert "0 notebook(s) to execute" in again.stdout, again.stdout
