"""Whole models (part II of the book), assembled from ``transformer_lib.layers``."""

from ._hub import hub_reachable
from .bert import (BERT, BERTConfig, BERTForPreTraining, BERTForSequenceClassification, bert_classifier_from_hf,
                   bert_from_hf, bert_pretraining_from_hf)
from .encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from .gpt2 import GPT2, GPT2Config, gpt2_from_hf

__all__ = ["hub_reachable", "BERT", "BERTConfig", "BERTForPreTraining", "BERTForSequenceClassification", "bert_classifier_from_hf", "bert_from_hf", "bert_pretraining_from_hf", "EncoderDecoder", "EncoderDecoderConfig", "GPT2", "GPT2Config", "gpt2_from_hf"]
