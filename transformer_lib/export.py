"""Save a trained model: safetensors for the library, ONNX for the reader's browser.

Defined in chapter 7, *GPT-2* (section *The model in your browser*); chapters 8, 9 and 10
export their models the same way. ``export_for_browser`` writes one folder per model:

* ``model.safetensors`` + ``config.json``: the weights and config, which
  :func:`load_pretrained` turns back into the model (the page's download links);
* ``model.onnx``: the forward pass with every layer's attention weights as extra outputs,
  which the book's live panel runs with ONNX Runtime Web (``book/_ext/live_models.py``);
* ``browser.json``: what the panel needs besides: the tokens, the shapes, the file sizes.

Chapter 8 also exports its fine-tuned speaker classifier (``BERTForSequenceClassification``, kind
``classifier``): its ``browser.json`` names the classes (``labels``) and the ``[CLS]``/``[SEP]`` ids.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import logging
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor, nn

from ._checks import check_device, check_finite_weights, check_int, check_positive
from .config import unknown_settings
from .layers.attention import capture_attention
from .models import (BERT, GPT2, BERTConfig, BERTForSequenceClassification, EncoderDecoder,
                     EncoderDecoderConfig, GPT2Config)

# class name -> (model, config, the live panel's kind, ONNX inputs, ONNX attention outputs)
MODELS = {
    "GPT2": (GPT2, GPT2Config, "causal-lm", ("input_ids",), ("attention",)),
    "BERT": (BERT, BERTConfig, "masked-lm", ("input_ids",), ("attention",)),
    "EncoderDecoder": (EncoderDecoder, EncoderDecoderConfig, "seq2seq", ("src_ids", "tgt_ids"),
                       ("encoder_attention", "decoder_attention", "cross_attention")),
    # logits (1, n_classes): one row for the whole input, read from its first token, [CLS]
    "BERTForSequenceClassification": (BERTForSequenceClassification, BERTConfig, "classifier", ("input_ids",),
                                      ("attention",)),
}
SPECIAL_ROLES = ("mask", "bos", "eos", "pad", "cls", "sep")
EXPORT_DIR_VARIABLE = "TFS_BROWSER_MODELS"  # where export_for_browser writes (the book's build sets it)
# what the ONNX export needs: only the book's site does (its live panels), so a learner's install
# (transformer_lib[book], Colab's set-up cell) leaves them out, and export_for_browser skips the ONNX file
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")


def _model_name(model: nn.Module) -> str:
    for name, (cls, *_) in MODELS.items():
        if type(model) is cls:
            return name
    raise TypeError(f"model must be one of {', '.join(MODELS)}, got {type(model).__name__}")


def _config(model: nn.Module):
    """The model's config; a classifier's is its encoder's (it adds ``n_classes`` only)."""
    return model.bert.config if isinstance(model, BERTForSequenceClassification) else model.config


def save_pretrained(model: nn.Module, directory: str | os.PathLike) -> Path:
    """Write ``model.safetensors`` and ``config.json`` into ``directory``; returns the folder."""
    import safetensors.torch

    name = _model_name(model)
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"directory must be a folder (it gets model.safetensors and config.json), "
                         f"got the file {directory}")
    directory.mkdir(parents=True, exist_ok=True)
    # save_model (not save_file) stores a tied head once and restores the tie on loading
    safetensors.torch.save_model(model, str(directory / "model.safetensors"))
    config = {"model": name, "config": _config(model).to_dict()}
    if isinstance(model, BERTForSequenceClassification):  # the head's settings beside the encoder's
        config.update(n_classes=model.n_classes, dropout=model.drop.p)
    (directory / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    return directory


def load_pretrained(directory: str | os.PathLike, device: str | torch.device = "cpu") -> nn.Module:
    """The model that :func:`save_pretrained` (or a page's download links) saved, in eval mode.

    A file that is not what it should be (damaged, a web page, another library's) is refused with
    an error that names it and says what it is.
    """
    import safetensors.torch

    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory must be a folder's path, got {type(directory).__name__}")
    device = check_device(device) or torch.device("cpu")
    directory = Path(directory)
    if directory.is_file():
        raise ValueError(f"directory must be the folder that holds config.json and model.safetensors, "
                         f"got the file {directory}: pass its folder, {directory.parent}")
    for file in ("config.json", "model.safetensors"):
        if not (directory / file).is_file():
            hub = (f" (for a model of the Hugging Face Hub, such as {str(directory)!r}: "
                   "tl.GPT2.from_pretrained or tl.BERT.from_pretrained)" if not directory.exists() else "")
            raise FileNotFoundError(f"{directory / file} is missing: directory must hold "
                                    f"config.json and model.safetensors (from save_pretrained){hub}")
    config_path, weights = directory / "config.json", directory / "model.safetensors"
    model = _model_from_config(config_path)
    try:
        safetensors.torch.load_model(model, str(weights), strict=True, device=str(device))
    except Exception as e:  # safetensors' own error for a bad file; RuntimeError for weights that don't fit
        raise ValueError(_weights_problem(weights, config_path, e)) from e
    return model.eval()


def _model_from_config(path: Path) -> nn.Module:
    """The untrained model that ``path`` describes, a ``config.json`` from :func:`save_pretrained`."""
    raw = path.read_bytes()
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        start = raw[:40].decode("utf-8", errors="replace")
        page = (": a web page (HTML) was saved instead of the file; download the file itself (the page's "
                "download link, or GitHub's Raw button)" if start.lstrip().startswith("<") else "")
        raise ValueError(f"{path} is not JSON ({e}); it starts with {start!r}{page}") from None
    if not isinstance(meta, dict) or "model" not in meta or "config" not in meta:
        keys = list(meta)[:6] if isinstance(meta, dict) else type(meta).__name__
        hf = isinstance(meta, dict) and "model_type" in meta
        foreign = (f" It is a Hugging Face config (model_type {meta.get('model_type')!r}): load that "
                   "checkpoint with transformers and convert it, "
                   "tl.gpt2_from_hf(GPT2LMHeadModel.from_pretrained(folder)) or tl.bert_from_hf(...)"
                   if hf else "")
        raise ValueError(f"{path} is not a transformer_lib config: save_pretrained writes "
                         f"{{\"model\": ..., \"config\": {{...}}}}, this file has {keys}.{foreign}")
    if meta["model"] not in MODELS:
        raise ValueError(f"{path} names model {meta['model']!r}; expected one of {', '.join(MODELS)}")
    cls, config_cls, *_ = MODELS[meta["model"]]
    settings = meta["config"]
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: \"config\" must be a JSON object of settings, "
                         f"got {type(settings).__name__}")
    unknown = unknown_settings(config_cls, settings)
    if unknown:
        raise ValueError(f"{path}: {unknown} (was it written by another version of transformer_lib?)")
    try:
        if cls is BERTForSequenceClassification:
            n_classes, dropout = meta.get("n_classes"), meta.get("dropout")
            if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 2:
                raise ValueError(f"\"n_classes\" must be an integer >= 2 (the classifier's classes), "
                                 f"got {n_classes!r}")
            return cls(BERT(config_cls(**settings)), n_classes, dropout=dropout)
        return cls(config_cls(**settings))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path} holds an invalid {config_cls.__name__}: {e}") from None


def _weights_problem(weights: Path, config_path: Path, error: Exception) -> str:
    """Why ``weights`` could not be loaded, from its first bytes and the loader's error."""
    with open(weights, "rb") as f:
        head = f.read(8)
    if head.startswith(b"PK\x03\x04") or head[:1] == b"\x80":
        return (f"{weights} is a PyTorch pickle (torch.save), not a safetensors file. Load it with "
                "model.load_state_dict(torch.load(path, weights_only=True)); "
                "tl.save_pretrained(model, folder) writes the folder that load_pretrained reads")
    if head.lstrip()[:1] == b"<":
        return f"{weights} is a web page (HTML), not the weights: download the file itself"
    if isinstance(error, RuntimeError):  # the tensors' names or shapes differ from the config's model
        problems = [line.strip().rstrip(".") for line in str(error).splitlines()[1:] if line.strip()]
        more = f", and {len(problems) - 1} more" if len(problems) > 1 else ""
        return (f"{weights} does not hold the weights of the model that {config_path} describes "
                f"({problems[0] if problems else error}{more}): the two files come from different models")
    return (f"{weights} could not be read ({error}): it is damaged or incomplete (a download cut short?). "
            "Download it again, or save the model again with tl.save_pretrained")


class WithAttention(nn.Module):
    """``model``'s forward for one sequence, returning the attention weights beside the logits.

    Outputs: ``(1, seq, vocab)`` logits (a classifier's: ``(1, n_classes)``), then one
    ``(n_layers, n_heads, seq_q, seq_k)`` stack per kind of attention (one for GPT2, BERT and the
    classifier; encoder, decoder and cross for EncoderDecoder).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor, tgt_ids: Tensor | None = None) -> tuple[Tensor, ...]:
        """``ids``: ``(1, seq)``; for EncoderDecoder the source, and ``tgt_ids`` ``(1, seq_tgt)``."""
        with capture_attention(self.model) as maps:
            logits = self.model(ids) if tgt_ids is None else self.model(ids, tgt_ids)
        if not isinstance(self.model, EncoderDecoder):
            return logits, torch.stack([w[0] for w in maps.values()])
        encoder = [w[0] for name, w in maps.items() if name.startswith("encoder.")]
        self_attn = [w[0] for name, w in maps.items() if name.endswith(".self_attn")]
        cross = [w[0] for name, w in maps.items() if name.endswith(".cross_attn")]
        return logits, torch.stack(encoder), torch.stack(self_attn), torch.stack(cross)


def export_onnx(model: nn.Module, path: str | os.PathLike) -> Path:
    """Write ``model`` (a copy, on the CPU in float32 and eval mode) as one ONNX file.

    Inputs are int64 ``(1, seq)`` ids of any length up to ``n_ctx``; outputs are those of
    :class:`WithAttention`, named as in ``MODELS``.
    """
    name = _model_name(model)
    _, _, _, inputs, attention = MODELS[name]
    cpu = copy.deepcopy(model).float().cpu().eval()
    n_ctx = _config(cpu).n_ctx
    example = tuple(torch.zeros(1, min(3 + i, n_ctx), dtype=torch.long) for i in range(len(inputs)))
    # export specialises a length of 1, so the example is longer; the graph takes any length
    dims = [{1: torch.export.Dim(f"{k}_len", min=1, max=n_ctx)} for k in inputs]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the exporter's own notes (capture_attention's dict is a "side effect"; torchvision's
    # operators are absent) would print under the chapter's cell
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(WithAttention(cpu).eval(), example, str(path), dynamo=True,
                              external_data=False, input_names=list(inputs),
                              output_names=["logits", *attention], dynamic_shapes=dims, verbose=False)
    finally:
        quiet.setLevel(level)
    return path


@dataclass
class BrowserExport:
    """What :func:`export_for_browser` wrote: the folder and the check of the ONNX file."""

    name: str
    directory: Path
    kind: str
    onnx_bytes: int
    safetensors_bytes: int
    parameters: int
    max_abs_diff: float | None  # ONNX Runtime's outputs against PyTorch's, on ``example`` (None: skipped)
    export_seconds: float
    skipped: str = ""  # why there is no ONNX file (the ONNX packages are not installed), else ""
    labels: tuple[str, ...] = ()  # a classifier's class names, class 0 first (other kinds: none)

    def __repr__(self) -> str:
        if self.skipped:
            return (f"BrowserExport({self.name!r}, {self.kind}, model.safetensors "
                    f"{self.safetensors_bytes / 1e6:.2f} MB in {self.directory}; {self.skipped})")
        return (f"BrowserExport({self.name!r}, {self.kind}, ONNX {self.onnx_bytes / 1e6:.2f} MB, "
                f"max |ONNX Runtime - PyTorch| = {self.max_abs_diff:.1e})")


def check_onnx(model: nn.Module, path: str | os.PathLike, ids: Sequence[Tensor]) -> float:
    """Largest absolute difference between ONNX Runtime's outputs and PyTorch's on ``ids``."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    cpu = copy.deepcopy(model).float().cpu().eval()
    with torch.no_grad():
        expected = WithAttention(cpu)(*ids)
    feed = {i.name: t.numpy() for i, t in zip(session.get_inputs(), ids)}
    got = session.run(None, feed)
    return max(float((torch.from_numpy(g) - e).abs().max()) for g, e in zip(got, expected))


def export_for_browser(
    model: nn.Module,
    tokens: Sequence[str],
    name: str,
    example: Sequence[Sequence[int]],
    *,
    special: dict[str, int] | None = None,
    labels: Sequence[str] | None = None,
    directory: str | os.PathLike | None = None,
    tolerance: float = 1e-4,
) -> BrowserExport:
    """Write the folder that a live panel on the book's page loads (see the module's docstring).

    Args:
        tokens: the string of each token id, ``tokens[i]`` for id ``i``: one character each
            for a character tokenizer, plus the special tokens' names (``"[MASK]"``, ``"<bos>"``).
        name: the folder's name, e.g. ``"ch07-gpt"``.
        example: one id sequence per ONNX input, on which ONNX Runtime is checked against PyTorch.
        special: ids of special tokens by role: ``mask`` (BERT), ``bos``, ``eos``, ``pad``; a
            classifier needs ``cls`` and ``sep``, which the panel puts around the typed line.
        labels: a classifier's class names, ``labels[c]`` for class ``c`` (the panel's bars);
            only for a ``BERTForSequenceClassification``, which needs them.
        directory: the parent folder; default ``$TFS_BROWSER_MODELS``, else ``browser_models``.
        tolerance: the largest difference between ONNX Runtime and PyTorch accepted; beyond it,
            a ``RuntimeError`` (and no ``browser.json``, so no page publishes the file).

    Without the ONNX packages (``ONNX_PACKAGES``: a learner's install, as in Colab, has no need of
    them) only ``model.safetensors`` and ``config.json`` are written, and the result's ``skipped``
    says so. A model whose weights are not finite (a diverged run) is refused.
    """
    model_name = _model_name(model)
    _, _, kind, inputs, attention = MODELS[model_name]
    config = _config(model)
    special = _check_export(model, tokens, name, example, special, inputs, tolerance)
    labels = _check_labels(model, labels, special)
    check_finite_weights(model, "export the model")
    parent = Path(directory or os.environ.get(EXPORT_DIR_VARIABLE) or "browser_models")
    folder = parent / name
    start = time.perf_counter()
    save_pretrained(model, folder)
    (folder / "model.onnx").unlink(missing_ok=True)  # an older export's file is not this model
    (folder / "browser.json").unlink(missing_ok=True)
    missing = [m for m in ONNX_PACKAGES if importlib.util.find_spec(m) is None]
    n_params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    if missing:
        skipped = (f"ONNX export skipped: {', '.join(missing)} not installed. Only the book's web page "
                   f"needs the ONNX file (its live panel); here the model is live in the notebook. "
                   f"pip install {' '.join(ONNX_PACKAGES)} to export it")
        return BrowserExport(name, folder, kind, 0, (folder / "model.safetensors").stat().st_size,
                             n_params, None, time.perf_counter() - start, skipped, labels)
    onnx_path = export_onnx(model, folder / "model.onnx")
    seconds = time.perf_counter() - start
    ids = [torch.tensor([list(seq)], dtype=torch.long) for seq in example]
    diff = check_onnx(model, onnx_path, ids)
    if not diff <= tolerance:
        raise RuntimeError(f"ONNX Runtime's outputs differ from PyTorch's by {diff:.2e} on example, more than "
                           f"tolerance={tolerance}: {onnx_path} does not compute the model")
    info = {
        "name": name, "kind": kind, "model": model_name, "tokens": list(tokens), "special": special,
        "vocab_size": config.vocab_size, "n_ctx": config.n_ctx, "n_heads": config.n_heads,
        "n_layers": config.n_layers, "n_decoder_layers": getattr(config, "n_decoder_layers", None),
        "d_model": config.d_model, "parameters": n_params,
        "inputs": list(inputs), "outputs": ["logits", *attention],
        "files": {f: (folder / f).stat().st_size for f in ("model.onnx", "model.safetensors", "config.json")},
        "check": {"example": [list(seq) for seq in example], "max_abs_diff": diff},
    }
    if labels:
        info["labels"] = list(labels)
    (folder / "browser.json").write_text(json.dumps(info, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return BrowserExport(name, folder, kind, info["files"]["model.onnx"], info["files"]["model.safetensors"],
                         n_params, diff, seconds, labels=labels)


def _check_export(model, tokens, name, example, special, inputs, tolerance) -> dict:
    """:func:`export_for_browser`'s arguments; returns ``special`` as a dict."""
    config = _config(model)
    if isinstance(tokens, str) or not isinstance(tokens, Sequence) \
            or not all(isinstance(t, str) for t in tokens):
        raise TypeError("tokens must be a list of strings, the text of each token id (tok.chars for a "
                        f"character tokenizer), got {type(tokens).__name__}")
    if len(tokens) != config.vocab_size:
        raise ValueError(f"tokens must give a string for each of the vocab_size={config.vocab_size} ids, "
                         f"got {len(tokens)}")
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"name must be a plain folder name such as 'ch07-gpt', got {name!r}")
    if isinstance(example, (str, Tensor)) or not isinstance(example, Sequence) or len(example) != len(inputs):
        got = len(example) if isinstance(example, Sequence) else type(example).__name__
        raise ValueError(f"example must be a list of {len(inputs)} id sequence(s) ({', '.join(inputs)}), "
                         f"e.g. [tok.encode(text)], got {got}")
    for k, seq in enumerate(example):
        seq = seq.tolist() if isinstance(seq, Tensor) else seq
        if isinstance(seq, (str, bytes)) or not isinstance(seq, Sequence) \
                or not 1 <= len(seq) <= config.n_ctx:
            raise ValueError(f"example[{k}] must be a list of 1 to n_ctx={config.n_ctx} token ids, "
                             f"got {seq!r:.60}")
        for i in seq:
            check_int(f"example[{k}]'s ids", i, low=0, high=config.vocab_size - 1)
    special = dict(special or {})
    for role, i in special.items():
        if role not in SPECIAL_ROLES:
            raise ValueError(f"special's roles are {', '.join(SPECIAL_ROLES)}, got {role!r}")
        check_int(f"special[{role!r}]", i, low=0, high=config.vocab_size - 1)
    check_positive("tolerance", tolerance)
    return special


def _check_labels(model, labels, special: dict) -> tuple[str, ...]:
    """A classifier's class names (one non-empty string per class) and its ``cls``/``sep`` ids."""
    if not isinstance(model, BERTForSequenceClassification):
        if labels is not None:
            raise ValueError(f"labels are a classifier's class names; a {type(model).__name__} has no "
                             "classes (leave labels out)")
        return ()
    n = model.n_classes
    if isinstance(labels, str) or not isinstance(labels, Sequence) or len(labels) != n \
            or not all(isinstance(x, str) and x.strip() for x in labels):
        got = f"{len(labels)} of them" if isinstance(labels, Sequence) and not isinstance(labels, str) \
            else type(labels).__name__
        raise ValueError(f"labels must be the n_classes={n} class names (non-empty strings), class 0 first, "
                         f"got {got}: {labels!r:.80}")
    missing = [role for role in ("cls", "sep") if role not in special]
    if missing:
        ids = f"{' and '.join(missing)} id{'s' if len(missing) > 1 else ''}"
        raise ValueError(f"a classifier reads [CLS] line [SEP]: special must give the {ids}, "
                         "e.g. special={'cls': 66, 'sep': 67}")
    return tuple(labels)
