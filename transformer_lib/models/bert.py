"""BERT: a bidirectional encoder trained by masked-language modelling.

Taught in chapter 8, *BERT* (``book/08_bert.ipynb``).

    tokens -> token + position (+ token-type) embeddings -> [norm] -> n_layers x TransformerBlock(bidirectional)
           -> [final norm] -> MLM head at the masked positions only -> logits

BERT as it is used: :class:`BERTForSequenceClassification` pools the vector of the first token,
``[CLS]`` (dense + tanh), and classifies it; :class:`BERTForPreTraining` adds BERT's second
objective, next-sentence prediction, on the same pooled vector. Both are named as in Hugging Face.

The defaults are the *original* BERT-base (post-norm, learned positions, token types,
embedding LayerNorm, MLM head transform). :meth:`BERTConfig.cramming` gives a modern
Cramming-style BERT (Geiping & Goldstein, ICML 2023): pre-norm, no token types, no biases.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_int, check_padding_mask, check_same_shape, check_token_ids
from ..config import TransformerConfig, check_config
from ..init import init_weights_
from ..layers.block import TransformerBlock
from ..layers.embedding import TokenEmbedding
from ..params import count_parameters
from ..layers.feedforward import ACTIVATIONS
from ..layers.masks import padding_mask
from ..layers.normalization import make_norm
from ..layers.position_registry import make_positions
from ..losses import IGNORE_INDEX, masked_lm_loss
from ._hub import hf_activation, load_hf_model


@dataclass
class BERTConfig(TransformerConfig):
    """BERT-base by default (110M parameters). Defined in chapter 8."""

    vocab_size: int = 30522
    n_ctx: int = 512
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    ffn: str = "gelu"
    norm_position: str = "post"
    norm_eps: float = 1e-12
    type_vocab_size: int = 2  # 0: no token-type (segment) embeddings
    embedding_norm: bool = True  # LayerNorm after summing the embeddings
    mlm_transform: bool = True  # dense + activation + norm before the vocabulary projection
    pad_token_id: int = 0
    mask_token_id: int | None = None  # [MASK]: 103 in bert-base-uncased; used by the MLM collator

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("type_vocab_size", self.type_vocab_size, low=0)
        check_int("pad_token_id", self.pad_token_id, low=0, high=self.vocab_size - 1)
        if self.mask_token_id is not None:
            check_int("mask_token_id", self.mask_token_id, low=0, high=self.vocab_size - 1)

    @classmethod
    def cramming(cls, **overrides) -> "BERTConfig":
        """A modern BERT recipe (Geiping & Goldstein, 2023): pre-norm, no token types, no biases,
        sinusoidal positions scaled by a learned factor."""
        settings = dict(
            norm_position="pre", type_vocab_size=0, bias=False, norm_eps=1e-12, positional="scaled_sinusoidal"
        )
        return cls(**{**settings, **overrides})


class MLMHead(nn.Module):
    """Hidden state -> vocabulary logits. The decoder weight is tied to the token embedding."""

    def __init__(self, config: BERTConfig) -> None:
        super().__init__()
        self.activation = config.ffn if config.ffn in ACTIVATIONS else "gelu"
        d, transform = config.d_model, config.mlm_transform
        self.dense = nn.Linear(d, d, bias=config.bias) if transform else None
        self.norm = make_norm(config.norm, d, config.norm_eps, config.bias) if transform else None
        self.decoder = nn.Linear(config.d_model, config.vocab_size, bias=config.bias)

    def forward(self, h: Tensor) -> Tensor:
        """``(..., d_model) -> (..., vocab_size)``."""
        if self.dense is not None:
            h = self.norm(ACTIVATIONS[self.activation](self.dense(h)))
        return self.decoder(h)


class BERT(nn.Module):
    """Bidirectional encoder with a masked-LM head. Defined in chapter 8."""

    def __init__(self, config: BERTConfig) -> None:
        super().__init__()
        check_config(config, BERTConfig, "BERT", "bert_from_hf")
        self.config = config
        d = config.d_model
        self.token_embedding = TokenEmbedding(config.vocab_size, d)
        self.position_embedding, self.positions = make_positions(config)
        self.token_type_embedding = TokenEmbedding(config.type_vocab_size, d) if config.type_vocab_size else None
        self.embedding_norm = make_norm(config.norm, d, config.norm_eps, config.bias) if config.embedding_norm else nn.Identity()
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(**config.block_kwargs(), attn_kind="bidirectional", positions=self.positions)
            for _ in range(config.n_layers)
        )
        self.norm_f = make_norm(config.norm, d, config.norm_eps, config.bias) if config.norm_position == "pre" else nn.Identity()
        self.mlm_head = MLMHead(config)
        init_weights_(self, std=config.init_std)  # BERT: N(0, 0.02) everywhere, no depth scaling
        if config.tie_weights:
            self.mlm_head.decoder.weight = self.token_embedding.weight

    def encode(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """``(batch, seq)`` ids -> ``(batch, seq, d_model)`` contextual vectors.

        ``attention_mask``: ``(batch, seq)``, 1 = token, 0 = padding (padded keys are hidden).
        ``token_type_ids``: ``(batch, seq)`` segment ids (sentence A = 0, B = 1); default all 0.
        """
        check_token_ids("input_ids", input_ids, n_ctx=self.config.n_ctx)
        mask = check_padding_mask("attention_mask", attention_mask, tuple(input_ids.shape), input_ids.device)
        x = self.token_embedding(input_ids)
        if self.position_embedding is not None:
            x = x + self.position_embedding(input_ids.shape[1])
        if self.token_type_embedding is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            check_same_shape("token_type_ids", token_type_ids, input_ids)
            x = x + self.token_type_embedding(token_type_ids, name="token_type_ids")
        elif token_type_ids is not None:
            raise ValueError("token_type_ids given, but this BERT has no token-type embeddings "
                             "(type_vocab_size=0)")
        x = self.drop(self.embedding_norm(x))
        mask = padding_mask(mask) if mask is not None else None
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.norm_f(x)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        masked_positions: Tensor | None = None,
    ) -> Tensor:
        """MLM logits: ``(batch, seq, vocab)``, or ``(n_masked, vocab)`` at the True entries of the
        bool ``masked_positions`` ``(batch, seq)``, which skips the head's work everywhere else."""
        h = self.encode(input_ids, attention_mask, token_type_ids)
        if masked_positions is not None:
            check_same_shape("masked_positions", masked_positions, input_ids, torch.bool)
            h = h[masked_positions]  # (n_masked, d_model)
        return self.mlm_head(h)

    def mlm_loss(
        self,
        input_ids: Tensor,
        labels: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        label_smoothing: float = 0.0,
    ) -> Tensor:
        """Masked-LM loss. ``labels``: ``(batch, seq)``, the original token where the input was
        masked and ``IGNORE_INDEX`` (-100) elsewhere. Only masked positions reach the head."""
        check_same_shape("labels", labels, input_ids)
        masked = labels != IGNORE_INDEX
        logits = self(input_ids, attention_mask, token_type_ids, masked_positions=masked)
        return masked_lm_loss(logits, labels[masked], label_smoothing)

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Distinct parameters; ``exclude_embeddings`` leaves out token, position and token-type embeddings."""
        embeddings = (self.token_embedding, self.position_embedding, self.token_type_embedding)
        return count_parameters(self, exclude=embeddings if exclude_embeddings else ())

    @classmethod
    def from_pretrained(cls, model_name: str = "bert-base-uncased") -> "BERT":
        """Fetch a BERT masked-LM checkpoint from the Hub and convert it."""
        return bert_from_hf(load_hf_model("BertForMaskedLM", model_name))


class Pooler(nn.Module):
    """BERT's pooler: the first token's vector (``[CLS]``) through a dense layer and tanh, the
    summary of the whole input that sentence-level heads read. Taught in chapter 8."""

    def __init__(self, d_model: int, bias: bool = True) -> None:
        super().__init__()
        self.dense = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, h: Tensor) -> Tensor:
        """``(batch, seq, d_model) -> (batch, d_model)``: reads position 0 only."""
        return torch.tanh(self.dense(h[:, 0]))


def check_class_labels(name: str, labels, batch: int, n_classes: int) -> None:
    """``labels`` must be a ``(batch,)`` integer tensor of classes in ``[0, n_classes)`` (chapter 8)."""
    if not isinstance(labels, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of class ids, got {type(labels).__name__}")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer class ids, got dtype {labels.dtype}")
    if labels.shape != (batch,):
        raise ValueError(f"{name} must have shape (batch,) = ({batch},), one class per sequence, "
                         f"got {tuple(labels.shape)}")
    if labels.numel() and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(f"{name} must be in [0, {n_classes - 1}], got values from "
                         f"{int(labels.min())} to {int(labels.max())}")


class BERTForSequenceClassification(nn.Module):
    """A BERT encoder, its pooled ``[CLS]`` vector, dropout and a linear classifier: Hugging Face's
    ``BertForSequenceClassification``. Taught in chapter 8.

    ``bert`` is the encoder, pretrained or new; it is used as it is (not copied), so fine-tuning
    changes it. Its MLM head stays attached but unused.
    """

    def __init__(self, bert: BERT, n_classes: int, dropout: float | None = None) -> None:
        super().__init__()
        if not isinstance(bert, BERT):
            raise TypeError(f"bert must be a tl.BERT, got {type(bert).__name__}")
        check_int("n_classes", n_classes, low=2)
        self.bert, self.n_classes = bert, n_classes
        self.pooler = Pooler(bert.config.d_model, bias=bert.config.bias)
        self.drop = nn.Dropout(bert.config.dropout if dropout is None else dropout)
        self.classifier = nn.Linear(bert.config.d_model, n_classes)
        init_weights_(self.pooler, std=bert.config.init_std)
        init_weights_(self.classifier, std=bert.config.init_std)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """``(batch, seq)`` ids, ``[CLS]`` first -> ``(batch, n_classes)`` logits."""
        h = self.bert.encode(input_ids, attention_mask, token_type_ids)  # (batch, seq, d_model)
        return self.classifier(self.drop(self.pooler(h)))

    def loss(
        self,
        input_ids: Tensor,
        labels: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """Cross-entropy of the ``(batch,)`` class ``labels``."""
        check_class_labels("labels", labels, input_ids.shape[0], self.n_classes)
        return F.cross_entropy(self(input_ids, attention_mask, token_type_ids), labels)


class BERTForPreTraining(nn.Module):
    """BERT's two pre-training objectives on one encoder: masked-LM (the encoder's own head) and
    next-sentence prediction, ``seq_relationship``, a linear layer on the pooled ``[CLS]`` vector
    (Hugging Face's ``BertForPreTraining``). NSP label 0: B follows A; 1: B is a random sentence.
    Taught in chapter 8."""

    def __init__(self, bert: BERT) -> None:
        super().__init__()
        if not isinstance(bert, BERT):
            raise TypeError(f"bert must be a tl.BERT, got {type(bert).__name__}")
        if bert.token_type_embedding is None:
            raise ValueError("next-sentence prediction needs segment embeddings: this BERT has "
                             "type_vocab_size=0")
        self.bert = bert
        self.pooler = Pooler(bert.config.d_model, bias=bert.config.bias)
        self.seq_relationship = nn.Linear(bert.config.d_model, 2)
        init_weights_(self.pooler, std=bert.config.init_std)
        init_weights_(self.seq_relationship, std=bert.config.init_std)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(batch, seq)`` ids -> MLM logits ``(batch, seq, vocab)`` and NSP logits ``(batch, 2)``."""
        h = self.bert.encode(input_ids, attention_mask, token_type_ids)
        return self.bert.mlm_head(h), self.seq_relationship(self.pooler(h))

    def loss(
        self,
        input_ids: Tensor,
        next_sentence_label: Tensor,
        labels: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """NSP cross-entropy, plus the MLM loss at the masked positions when ``labels`` (``(batch, seq)``,
        -100 where not masked) are given: BERT's pre-training loss is their sum."""
        check_class_labels("next_sentence_label", next_sentence_label, input_ids.shape[0], 2)
        h = self.bert.encode(input_ids, attention_mask, token_type_ids)
        loss = F.cross_entropy(self.seq_relationship(self.pooler(h)), next_sentence_label)
        if labels is not None:
            check_same_shape("labels", labels, input_ids)
            masked = labels != IGNORE_INDEX
            loss = loss + masked_lm_loss(self.bert.mlm_head(h[masked]), labels[masked])
        return loss


def with_new_tokens(model: BERT, n_new: int, seed: int = 0) -> BERT:
    """A copy of ``model`` whose vocabulary has ``n_new`` more ids at its end (``[CLS]``, ``[SEP]``
    for a model pretrained without them); their embeddings start as new ones would, N(0, init_std),
    and every other weight is copied. Taught in chapter 8."""
    check_int("n_new", n_new, low=1)
    config = replace(model.config, vocab_size=model.config.vocab_size + n_new)
    grown = BERT(config).to(model.token_embedding.weight.device)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    old = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    new_rows = torch.randn(n_new, config.d_model, generator=g) * config.init_std
    emb = state["token_embedding.weight"]
    state["token_embedding.weight"] = torch.cat([emb, new_rows.to(emb)])
    if "mlm_head.decoder.weight" in state:
        dec = state["mlm_head.decoder.weight"]
        state["mlm_head.decoder.weight"] = (state["token_embedding.weight"] if config.tie_weights
                                            else torch.cat([dec, new_rows.to(dec)]))
    if "mlm_head.decoder.bias" in state:
        bias = state["mlm_head.decoder.bias"]
        state["mlm_head.decoder.bias"] = torch.cat([bias, bias.new_zeros(n_new)])
    with torch.no_grad():
        grown.load_state_dict(state, strict=True)
    assert old + n_new == grown.token_embedding.weight.shape[0]
    return grown.train(model.training)


def _config_from_hf(hf) -> BERTConfig:
    if getattr(hf, "position_embedding_type", "absolute") != "absolute":
        raise ValueError("only absolute position embeddings are supported, "
                         f"got {hf.position_embedding_type!r}")
    return BERTConfig(
        vocab_size=hf.vocab_size,
        n_ctx=hf.max_position_embeddings,
        d_model=hf.hidden_size,
        n_layers=hf.num_hidden_layers,
        n_heads=hf.num_attention_heads,
        d_ff=hf.intermediate_size,
        ffn=hf_activation(hf.hidden_act),
        norm_eps=hf.layer_norm_eps,
        type_vocab_size=hf.type_vocab_size,
        pad_token_id=hf.pad_token_id if hf.pad_token_id is not None else 0,
        tie_weights=bool(getattr(hf, "tie_word_embeddings", True)),
    )


def _encoder_state(src: dict, config: BERTConfig) -> dict:
    """The encoder's tensors (embeddings and blocks) of a Hugging Face state dict, in our names."""
    e = "bert.embeddings."
    state = {
        "token_embedding.weight": src[e + "word_embeddings.weight"],
        "position_embedding.weight": src[e + "position_embeddings.weight"],
        "token_type_embedding.weight": src[e + "token_type_embeddings.weight"],
        "embedding_norm.weight": src[e + "LayerNorm.weight"],
        "embedding_norm.bias": src[e + "LayerNorm.bias"],
    }
    names = {
        "attention.self.query": "attn.W_Q",
        "attention.self.key": "attn.W_K",
        "attention.self.value": "attn.W_V",
        "attention.output.dense": "attn.W_O",
        "attention.output.LayerNorm": "norm_1",
        "intermediate.dense": "ffn.W_in",
        "output.dense": "ffn.W_out",
        "output.LayerNorm": "norm_2",
    }
    for i in range(config.n_layers):
        for theirs, ours in names.items():
            for kind in ("weight", "bias"):
                state[f"blocks.{i}.{ours}.{kind}"] = src[f"bert.encoder.layer.{i}.{theirs}.{kind}"]
    return state


def _mlm_state(src: dict) -> dict:
    e, p = "bert.embeddings.", "cls.predictions."
    return {
        "mlm_head.dense.weight": src[p + "transform.dense.weight"],
        "mlm_head.dense.bias": src[p + "transform.dense.bias"],
        "mlm_head.norm.weight": src[p + "transform.LayerNorm.weight"],
        "mlm_head.norm.bias": src[p + "transform.LayerNorm.bias"],
        "mlm_head.decoder.weight": src.get(p + "decoder.weight", src[e + "word_embeddings.weight"]),
        "mlm_head.decoder.bias": src[p + "bias"] if p + "bias" in src else src[p + "decoder.bias"],
    }


def _load(model: nn.Module, state: dict, missing_ok: tuple[str, ...] = ()) -> None:
    """Load ``state``; only keys starting with ``missing_ok`` may be absent (they keep their init)."""
    with torch.no_grad():
        result = model.load_state_dict({k: v.contiguous() for k, v in state.items()}, strict=False)
    missing = [k for k in result.missing_keys if not k.startswith(missing_ok)]
    if missing or result.unexpected_keys:
        raise ValueError(f"weights do not match: missing {missing}, unexpected {result.unexpected_keys}")


def bert_from_hf(hf_model) -> BERT:
    """Convert a Hugging Face ``BertForMaskedLM`` into a :class:`BERT` with the same weights.

    ==================================================  ==================================
    Hugging Face (prefix ``bert.``)                      transformer_lib
    ==================================================  ==================================
    embeddings.word_embeddings                          token_embedding
    embeddings.position_embeddings                      position_embedding
    embeddings.token_type_embeddings                    token_type_embedding
    embeddings.LayerNorm                                embedding_norm
    encoder.layer.{i}.attention.self.query/key/value    blocks.{i}.attn.W_Q / W_K / W_V
    encoder.layer.{i}.attention.output.dense            blocks.{i}.attn.W_O
    encoder.layer.{i}.attention.output.LayerNorm        blocks.{i}.norm_1
    encoder.layer.{i}.intermediate.dense                blocks.{i}.ffn.W_in
    encoder.layer.{i}.output.dense                      blocks.{i}.ffn.W_out
    encoder.layer.{i}.output.LayerNorm                  blocks.{i}.norm_2
    cls.predictions.transform.dense / LayerNorm         mlm_head.dense / norm
    cls.predictions.decoder (+ bias)                    mlm_head.decoder (tied to token_embedding)
    ==================================================  ==================================

    :func:`bert_classifier_from_hf` and :func:`bert_pretraining_from_hf` add the pooler and heads.
    """
    config = _config_from_hf(hf_model.config)
    model = BERT(config)
    src = {k: v.detach() for k, v in hf_model.state_dict().items()}
    _load(model, {**_encoder_state(src, config), **_mlm_state(src)})
    return model.eval()


def bert_classifier_from_hf(hf_model) -> "BERTForSequenceClassification":
    """Convert a Hugging Face ``BertForSequenceClassification``: the encoder as in :func:`bert_from_hf`,
    ``bert.pooler.dense`` -> ``pooler.dense`` and ``classifier`` -> ``classifier``. It has no MLM
    head, so ours keeps its initial weights (a classifier never uses it)."""
    config = _config_from_hf(hf_model.config)
    model = BERTForSequenceClassification(BERT(config), hf_model.config.num_labels)
    src = {k: v.detach() for k, v in hf_model.state_dict().items()}
    state = {f"bert.{k}": v for k, v in _encoder_state(src, config).items()}
    for kind in ("weight", "bias"):
        state[f"pooler.dense.{kind}"] = src[f"bert.pooler.dense.{kind}"]
        state[f"classifier.{kind}"] = src[f"classifier.{kind}"]
    _load(model, state, missing_ok=("bert.mlm_head.",))
    return model.eval()


def bert_pretraining_from_hf(hf_model) -> "BERTForPreTraining":
    """Convert a Hugging Face ``BertForPreTraining`` (MLM + NSP): the encoder and MLM head as in
    :func:`bert_from_hf`, ``bert.pooler.dense`` -> ``pooler.dense`` and ``cls.seq_relationship``
    -> ``seq_relationship``."""
    config = _config_from_hf(hf_model.config)
    model = BERTForPreTraining(BERT(config))
    src = {k: v.detach() for k, v in hf_model.state_dict().items()}
    state = {f"bert.{k}": v for k, v in {**_encoder_state(src, config), **_mlm_state(src)}.items()}
    for kind in ("weight", "bias"):
        state[f"pooler.dense.{kind}"] = src[f"bert.pooler.dense.{kind}"]
        state[f"seq_relationship.{kind}"] = src[f"cls.seq_relationship.{kind}"]
    _load(model, state)
    return model.eval()
