"""Data: downloading text corpora (verified, cached, offline-capable) and tokenizers."""

from .bpe import BPETokenizer, train_bpe
from .batches import BatchSampler, get_batch, train_val_split
from .datasets import TINY_SHAKESPEARE, RemoteFile, data_dir, fetch, load_tiny_shakespeare
from .mlm import MLMCollator
from . import sentence_tasks
from .tokenizers import CharTokenizer, gpt2_tokenizer

__all__ = [
    "BPETokenizer", "BatchSampler", "MLMCollator", "get_batch", "train_val_split", "TINY_SHAKESPEARE", "CharTokenizer", "RemoteFile", "data_dir", "fetch", "gpt2_tokenizer", "load_tiny_shakespeare", "train_bpe", "sentence_tasks"]
