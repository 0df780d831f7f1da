"""Data: downloading text corpora (verified, cached, offline-capable) and tokenizers."""

from .datasets import TINY_SHAKESPEARE, RemoteFile, data_dir, fetch, load_tiny_shakespeare
from .tokenizers import CharTokenizer, gpt2_tokenizer

__all__ = ["TINY_SHAKESPEARE", "CharTokenizer", "RemoteFile", "data_dir", "fetch", "gpt2_tokenizer", "load_tiny_shakespeare"]
