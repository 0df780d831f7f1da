"""Corpora downloaded from their canonical addresses, checked against a SHA-256, and cached.

Used from chapter 1, *Tokens, embeddings and logits*; Tiny Shakespeare is the training set of
chapter 7, *GPT-2*.

Where files live, first match wins:

1. the ``data_dir`` argument;
2. the ``TFS_DATA_DIR`` environment variable (a folder with offline copies: CI and classrooms);
3. ``~/.cache/transformer_lib``.

A file that is present is used if its hash matches; a missing one is downloaded into that folder.
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "TFS_DATA_DIR"


@dataclass(frozen=True)
class RemoteFile:
    filename: str
    url: str
    sha256: str


TINY_SHAKESPEARE = RemoteFile(
    filename="tinyshakespeare.txt",
    url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
    sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
)


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The folder to read and cache files in: ``path``, else ``$TFS_DATA_DIR``, else ``~/.cache/transformer_lib``."""
    if path is not None:
        return Path(path).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    return Path.home() / ".cache" / "transformer_lib"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(remote: RemoteFile, path: str | os.PathLike | None = None, download: bool = True, timeout: float = 60) -> Path:
    """Return the local path of ``remote``, downloading it if needed; the SHA-256 is always checked."""
    folder = data_dir(path)
    target = folder / remote.filename
    if folder.exists() and not folder.is_dir():  # e.g. TFS_DATA_DIR set to the text file itself
        given = "the data_dir argument" if path is not None else f"{ENV_VAR}"
        better = f": use its folder, {folder.parent}" if folder.name == remote.filename else ""
        raise ValueError(f"{given} is {folder}, a file: it must name the folder that holds "
                         f"{remote.filename}{better}")
    if target.exists():
        digest = _sha256(target)
        if digest != remote.sha256:
            raise ValueError(
                f"{target} has SHA-256 {digest}, expected {remote.sha256}: the file is corrupt or a different "
                f"version. Delete it to download it again from {remote.url}"
            )
        return target
    if not download:
        raise FileNotFoundError(f"{target} does not exist and download=False")
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(remote.url, timeout=timeout) as response, open(partial, "wb") as out:
            out.write(response.read())
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise RuntimeError(
            f"could not download {remote.url} ({e}). Without internet, put a copy of {remote.filename} in a "
            f"folder and point {ENV_VAR} (or the data_dir argument) at it."
        ) from e
    digest = _sha256(partial)
    if digest != remote.sha256:
        partial.unlink()
        raise ValueError(f"download of {remote.url} has SHA-256 {digest}, expected {remote.sha256}")
    partial.replace(target)  # only a verified file ever gets the real name
    return target


def load_tiny_shakespeare(data_dir: str | os.PathLike | None = None, download: bool = True) -> str:
    """The Tiny Shakespeare corpus (Karpathy's char-rnn), 1,115,394 characters, as one string."""
    return fetch(TINY_SHAKESPEARE, data_dir, download).read_text(encoding="utf-8")
