"""The Colab set-up cell leaves every package Colab has as it was: it only adds.

A fresh virtual environment gets the versions Colab ships of the packages our install could touch
(``COLAB``, as seen in a Colab runtime; torch as a stand-in distribution of Colab's version, so that
nothing downloads 800 MB of CUDA wheels: pip sees it installed and its requirement met). Then the
library is installed exactly as ``book/_setup_cell.py`` installs it (its requirement string and
pip arguments), from this checkout instead of the tag, and ``pip freeze`` before and after must
differ only by additions. Before issue 23 the ``[book]`` extra pulled onnx 1.23, which upgraded
protobuf 5.29.5 to 7.x (Colab's TensorFlow and Google packages need protobuf < 6).

Marked ``pypi`` (``pytest -m pypi`` runs it alone, ``-m "not pypi"`` leaves it out); it needs
PyPI. Colab's environment is built with uv where it is installed (seconds; pip takes about two
minutes, most of it ipywidgets 7's Jupyter dependencies); the library is installed with pip, as the
cell does. Skipped when PyPI is unreachable.
"""

import ast
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUP_CELL = ROOT / "book" / "_setup_cell.py"
# what a Colab runtime had installed (issue 23); torch and einops as tests/test_book.py lists them
COLAB = {"numpy": "2.0.2", "protobuf": "5.29.5", "plotly": "5.24.1", "ipywidgets": "7.7.1",
         "ipykernel": "6.17.1", "transformers": "4.57.1", "tqdm": "4.67.1", "einops": "0.8.1"}
COLAB_TORCH = "2.8.0"
SITE_ONLY = ("onnx", "onnxscript", "onnxruntime")

pytestmark = pytest.mark.pypi


def _pypi_reachable(timeout: float = 5.0) -> bool:
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "PIP_INDEX_URL")):
        return True  # behind a proxy or a mirror: let pip try
    host = urlparse("https://pypi.org").hostname
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _setup_cell_install() -> tuple[str, list[str]]:
    """The set-up cell's requirement string and the pip arguments before it."""
    tree = ast.parse(SETUP_CELL.read_text())
    library = next(ast.literal_eval(node.value) for node in ast.walk(tree)
                   if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "LIBRARY")
    call = next(node for node in ast.walk(tree) if isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "run" and isinstance(node.args[0], ast.List))
    args = [ast.literal_eval(a) if isinstance(a, ast.Constant) else None for a in call.args[0].elts]
    assert args[:3] == [None, "-m", "pip"] and args[-1] is None, f"the set-up cell's pip call changed: {args}"
    return library, args[3:-1]  # e.g. ["install", "-q"]


def _torch_stand_in(site_packages: Path) -> None:
    """An installed distribution named torch, Colab's version, without its 800 MB of files."""
    info = site_packages / f"torch-{COLAB_TORCH}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {COLAB_TORCH}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")


def _freeze(python: Path) -> dict[str, str]:
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze",
                          "--disable-pip-version-check"], capture_output=True, text=True, check=True).stdout
    pairs = (line.split("==", 1) for line in out.splitlines() if "==" in line)
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in pairs}


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([str(python), "-m", "pip", *args, "--disable-pip-version-check"],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, \
        f"pip {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _uv() -> str | None:
    """uv's executable (the ``uv`` package, or on PATH), or None."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    if not _pypi_reachable():
        pytest.skip("PyPI is not reachable from here (offline)")
    venv = tmp_path_factory.mktemp("colab") / "venv"
    python = venv / "bin" / "python"
    pins = [f"{name}=={version}" for name, version in COLAB.items()]
    uv = _uv()
    if uv:  # --seed: the environment gets pip, which the set-up cell runs
        subprocess.run([uv, "venv", "-q", "--seed", "-p", sys.executable, str(venv)], check=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site_packages = Path(subprocess.run([str(python), "-c", where], capture_output=True, text=True,
                                        check=True).stdout.strip())
    _torch_stand_in(site_packages)
    if uv:
        result = subprocess.run([uv, "pip", "install", "-q", "--python", str(python), *pins],
                                capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"uv pip install failed:\n{result.stderr[-3000:]}"
    else:  # --no-compile: no .pyc for transformers' thousands of files (nothing reads them)
        _pip(python, "install", "-q", "--no-compile", *pins)
    return python


def test_the_setup_cell_only_adds_packages(colab, tmp_path):
    library, args = _setup_cell_install()
    assert library.startswith("transformer_lib[book] @ git+"), library
    # the same requirement, from this checkout (a copy: pip builds in the source folder)
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "transformer_lib", source / "transformer_lib",
                    ignore=shutil.ignore_patterns("__pycache__"))
    local = library.split(" @ ", 1)[0] + f" @ {source.as_uri()}"

    before = _freeze(colab)
    assert before["torch"] == COLAB_TORCH and before["protobuf"] == COLAB["protobuf"]
    result = _pip(colab, *args, local)
    after = _freeze(colab)

    changed = {name: f"{version} -> {after.get(name, 'removed')}" for name, version in before.items()
               if after.get(name) != version}
    assert not changed, f"the set-up cell changed packages Colab has: {changed}"
    added = sorted(set(after) - set(before))
    assert "transformer-lib" in added, added
    site_only = set(SITE_ONLY) & set(added)
    assert not site_only, f"site-only packages installed in Colab: {site_only}"
    assert "dependency conflicts" not in result.stderr and "ERROR" not in result.stderr, result.stderr
    print(f"\nthe set-up cell added {len(added)} packages: {', '.join(added)}")
