"""data: the verified, cached, offline-capable download, and the tokenizers."""

import hashlib
import os
from pathlib import Path

import pytest
import torch

import transformer_lib as tl
from transformer_lib.data import TINY_SHAKESPEARE, RemoteFile, data_dir, fetch

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_shared = pytest.mark.skipif(not (SHARED / "tinyshakespeare.txt").exists(), reason="../shared/data not present")


@pytest.fixture
def source(tmp_path):
    """A 'remote' file reached through a file:// URL, so the real download path runs offline."""
    payload = b"First Citizen:\nBefore we proceed any further, hear me speak.\n"
    remote_dir = tmp_path / "remote"
    remote_dir.mkdir()
    (remote_dir / "corpus.txt").write_bytes(payload)
    return RemoteFile("corpus.txt", (remote_dir / "corpus.txt").as_uri(), hashlib.sha256(payload).hexdigest()), payload


def test_download_verifies_and_caches(source, tmp_path):
    remote, payload = source
    cache = tmp_path / "cache"
    path = fetch(remote, cache)
    assert path == cache / "corpus.txt" and path.read_bytes() == payload
    Path(remote.url[len("file://"):]).unlink()  # the source is gone: the cache must serve
    assert fetch(remote, cache).read_bytes() == payload


def test_corrupt_cached_file_is_refused(source, tmp_path):
    remote, _ = source
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "corpus.txt").write_text("not the right text")
    with pytest.raises(ValueError, match=r"has SHA-256 .* expected .*Delete it to download it again"):
        fetch(remote, cache)


def test_download_with_wrong_hash_leaves_nothing(source, tmp_path):
    remote, _ = source
    bad = RemoteFile(remote.filename, remote.url, "0" * 64)
    with pytest.raises(ValueError, match="download of .* has SHA-256"):
        fetch(bad, tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())


def test_unreachable_source_explains_the_offline_setting(tmp_path):
    remote = RemoteFile("x.txt", (tmp_path / "missing.txt").as_uri(), "0" * 64)
    with pytest.raises(RuntimeError, match="point TFS_DATA_DIR"):
        fetch(remote, tmp_path / "cache")
    with pytest.raises(FileNotFoundError):
        fetch(remote, tmp_path / "cache", download=False)


def test_data_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("TFS_DATA_DIR", str(tmp_path / "env"))
    assert data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert data_dir() == tmp_path / "env"
    monkeypatch.delenv("TFS_DATA_DIR")
    assert data_dir() == Path.home() / ".cache" / "transformer_lib"


@needs_shared
def test_tiny_shakespeare_offline_copy():
    text = tl.load_tiny_shakespeare(SHARED, download=False)
    assert len(text) == 1_115_394 and text.startswith("First Citizen:")
    assert TINY_SHAKESPEARE.url.startswith("https://raw.githubusercontent.com/karpathy/char-rnn/")


def test_char_tokenizer_round_trip():
    tok = tl.CharTokenizer.from_text("hello world")
    assert tok.vocab_size == 8 and tok.chars[0] == " "
    ids = tok.encode("hold")
    assert tok.decode(ids) == "hold" and tok.decode(torch.tensor(ids)) == "hold"
    with pytest.raises(ValueError, match=r"character 'z' is not in this tokenizer's vocabulary of 8"):
        tok.encode("zoo")
    with pytest.raises(ValueError, match=r"token ids must be ints in \[0, 7\], got 8"):
        tok.decode([8])
    with pytest.raises(ValueError, match=r"got -1"):
        tok.decode([-1])  # not a silent wrap-around to the last character


@pytest.mark.skipif(not os.environ.get("TIKTOKEN_CACHE_DIR"), reason="TIKTOKEN_CACHE_DIR not set (no offline copy)")
def test_gpt2_tokenizer_offline():
    enc = tl.gpt2_tokenizer()
    assert enc.encode("A long time ago") == [32, 890, 640, 2084]
    assert enc.n_vocab == 50257
