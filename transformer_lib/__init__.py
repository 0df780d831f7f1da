"""transformer_lib: the library that the book *Transformers from Scratch* builds, chapter by chapter.

Where each piece is taught:

==========================================  =======================================================
chapter                                     module
==========================================  =======================================================
1  Tokens, embeddings and logits            ``data.tokenizers``, ``data.bpe``, ``layers.embedding``, ``losses``
2  Attention                                ``layers.attention``, ``layers.masks``, ``layers.attention_checks``
3  Feed-forward networks                    ``layers.feedforward``
4  Normalization and residuals              ``layers.normalization``, ``layers.block``
5  Positional encodings                     ``layers.positions``, ``layers.alibi``, ``layers.position_registry``
6  Weight tying                             ``models.gpt2`` (``tie_weights``), ``params``
7  GPT-2                                    ``data.datasets``, ``data.batches``, ``training``, ``models.gpt2``, ``init``, ``generation``, ``layers.kv_cache``
8  BERT                                     ``models.bert``, ``data.mlm``, ``data.sentence_tasks``
9  The full Transformer                     ``models.encoder_decoder``, ``layers.block.DecoderBlock``
10 Putting it together (LLaMA-style)        ``config`` (``norm="rmsnorm"``, ``positional="rope"``, ``ffn="swiglu"``)
6-10 (what training measured per device)   ``measurements``
7-10 (the trained model in the browser)    ``export`` (safetensors, ONNX), ``viz.live``
11 Making it fast                           ``speed`` (``fast_path``, FLOPs, MFU, profiles), ``training.TrainStep``,
                                            ``layers.fused_attention``
12 Scaling out                              ``distributed`` (DDP, FSDP under torchrun), ``checkpoints`` (resuming)
==========================================  =======================================================
"""

from .config import TransformerConfig
from .data import (BPETokenizer, BatchSampler, CharTokenizer, MLMCollator, get_batch, gpt2_tokenizer, load_tiny_shakespeare, train_bpe,
                   train_val_split)
from .generation import beam_search, generate, next_token_probs, sample_next_token
from .init import init_weights_
from .layers import (
    ALiBi,
    DecoderBlock,
    FeedForward,
    GatedFeedForward,
    KVCache,
    LayerNorm,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    PositionScheme,
    RMSNorm,
    RotaryEmbedding,
    ScaledSinusoidalPositionalEncoding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    TransformerBlock,
    capture_attention,
    causal_mask,
    combine_masks,
    gated_hidden_size,
    make_ffn,
    make_norm,
    padding_mask,
    scaled_dot_product_attention,
    sinusoidal_encoding,
)
from . import measurements
from .params import count_parameters
from .training import (Callback, TrainConfig, TrainState, TrainStep, auto_device, inverse_sqrt_lr, load_checkpoint, lr_at,
                       save_checkpoint, train, transformer_peak_lr)
from . import speed
from . import checkpoints, distributed
from .speed import fast_path, set_cpu_threads
from .export import export_for_browser, load_pretrained, save_pretrained
from .losses import IGNORE_INDEX, causal_lm_loss, masked_lm_loss
from .models import hub_reachable, BERT, GPT2, BERTConfig, BERTForPreTraining, BERTForSequenceClassification, bert_classifier_from_hf, bert_pretraining_from_hf, EncoderDecoder, EncoderDecoderConfig, GPT2Config, bert_from_hf, gpt2_from_hf

__version__ = "0.4.1"

__all__ = [
    "ALiBi", "BERT", "BERTConfig", "BERTForPreTraining", "BERTForSequenceClassification", "bert_classifier_from_hf", "bert_pretraining_from_hf", "BPETokenizer", "BatchSampler", "Callback", "CharTokenizer", "MLMCollator", "TrainConfig", "TrainState", "TrainStep", "DecoderBlock", "EncoderDecoder", "EncoderDecoderConfig", "FeedForward",
    "GPT2", "GPT2Config", "GatedFeedForward", "IGNORE_INDEX", "KVCache", "LayerNorm",
    "LearnedPositionalEmbedding", "MultiHeadAttention", "PositionScheme", "RMSNorm", "RotaryEmbedding",
    "ScaledSinusoidalPositionalEncoding", "SinusoidalPositionalEncoding", "TokenEmbedding", "TransformerBlock", "TransformerConfig",
    "auto_device", "bert_from_hf", "get_batch", "load_checkpoint", "lr_at", "inverse_sqrt_lr", "transformer_peak_lr", "save_checkpoint", "train", "train_val_split", "capture_attention", "causal_lm_loss", "fast_path", "set_cpu_threads", "speed", "checkpoints", "distributed", "causal_mask", "combine_masks", "count_parameters",
    "beam_search", "gated_hidden_size", "generate", "gpt2_from_hf", "gpt2_tokenizer", "hub_reachable", "init_weights_", "load_tiny_shakespeare", "make_ffn", "make_norm", "masked_lm_loss",
    "next_token_probs", "padding_mask", "sample_next_token", "scaled_dot_product_attention",
    "sinusoidal_encoding", "train_bpe",
]
