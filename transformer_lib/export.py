"""Save a trained model: safetensors for the library, ONNX for the reader's browser.

Defined in chapter 7, *GPT-2* (section *The model in your browser*); chapters 8, 9 and 10
export their models the same way. ``export_for_browser`` writes one folder per model:

* ``model.safetensors`` + ``config.json``: the weights and config, which
  :func:`load_pretrained` turns back into the model (the page's download links);
* ``model.onnx``: the forward pass with every layer's attention weights as extra outputs,
  which the book's live panel runs with ONNX Runtime Web (``book/_ext/live_models.py``);
* ``browser.json``: what the panel needs besides: the tokens, the shapes, the file sizes.
"""

from __future__ import annotations

import copy
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

from .layers.attention import capture_attention
from .models import BERT, GPT2, BERTConfig, EncoderDecoder, EncoderDecoderConfig, GPT2Config

# class name -> (model, config, the live panel's kind, ONNX inputs, ONNX attention outputs)
MODELS = {
    "GPT2": (GPT2, GPT2Config, "causal-lm", ("input_ids",), ("attention",)),
    "BERT": (BERT, BERTConfig, "masked-lm", ("input_ids",), ("attention",)),
    "EncoderDecoder": (EncoderDecoder, EncoderDecoderConfig, "seq2seq", ("src_ids", "tgt_ids"),
                       ("encoder_attention", "decoder_attention", "cross_attention")),
}
EXPORT_DIR_VARIABLE = "TFS_BROWSER_MODELS"  # where export_for_browser writes (the book's build sets it)


def _model_name(model: nn.Module) -> str:
    for name, (cls, *_) in MODELS.items():
        if type(model) is cls:
            return name
    raise TypeError(f"model must be one of {', '.join(MODELS)}, got {type(model).__name__}")


def save_pretrained(model: nn.Module, directory: str | os.PathLike) -> Path:
    """Write ``model.safetensors`` and ``config.json`` into ``directory``; returns the folder."""
    import safetensors.torch

    name = _model_name(model)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # save_model (not save_file) stores a tied head once and restores the tie on loading
    safetensors.torch.save_model(model, str(directory / "model.safetensors"))
    config = {"model": name, "config": model.config.to_dict()}
    (directory / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    return directory


def load_pretrained(directory: str | os.PathLike, device: str | torch.device = "cpu") -> nn.Module:
    """The model that :func:`save_pretrained` (or a page's download links) saved, in eval mode."""
    import safetensors.torch

    directory = Path(directory)
    for file in ("config.json", "model.safetensors"):
        if not (directory / file).is_file():
            raise FileNotFoundError(f"{directory / file} is missing: directory must hold "
                                    "config.json and model.safetensors (from save_pretrained)")
    meta = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    if meta.get("model") not in MODELS:
        raise ValueError(f"config.json names model {meta.get('model')!r}; expected one of {', '.join(MODELS)}")
    cls, config_cls, *_ = MODELS[meta["model"]]
    model = cls(config_cls(**meta["config"]))
    safetensors.torch.load_model(model, str(directory / "model.safetensors"), strict=True, device=str(device))
    return model.eval()


class WithAttention(nn.Module):
    """``model``'s forward for one sequence, returning the attention weights beside the logits.

    Outputs: ``(1, seq, vocab)`` logits, then one ``(n_layers, n_heads, seq_q, seq_k)`` stack per
    kind of attention (one for GPT2 and BERT; encoder, decoder and cross for EncoderDecoder).
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
    n_ctx = cpu.config.n_ctx
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
    max_abs_diff: float  # ONNX Runtime's outputs against PyTorch's, on ``example``
    export_seconds: float

    def __repr__(self) -> str:
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
    directory: str | os.PathLike | None = None,
    tolerance: float = 1e-4,
) -> BrowserExport:
    """Write the folder that a live panel on the book's page loads (see the module's docstring).

    Args:
        tokens: the string of each token id, ``tokens[i]`` for id ``i``: one character each
            for a character tokenizer, plus the special tokens' names (``"[MASK]"``, ``"<bos>"``).
        name: the folder's name, e.g. ``"ch07-gpt"``.
        example: one id sequence per ONNX input, on which ONNX Runtime is checked against PyTorch.
        special: ids of special tokens by role: ``mask`` (BERT), ``bos``, ``eos``, ``pad``.
        directory: the parent folder; default ``$TFS_BROWSER_MODELS``, else ``browser_models``.
        tolerance: the largest difference between ONNX Runtime and PyTorch accepted; beyond it,
            a ``RuntimeError`` (and no ``browser.json``, so no page publishes the file).
    """
    model_name = _model_name(model)
    _, _, kind, inputs, attention = MODELS[model_name]
    config = model.config
    if len(tokens) != config.vocab_size:
        raise ValueError(f"tokens must give a string for each of the vocab_size={config.vocab_size} ids, "
                         f"got {len(tokens)}")
    if len(example) != len(inputs):
        raise ValueError(f"example must hold {len(inputs)} id sequence(s) ({', '.join(inputs)}), got {len(example)}")
    special = dict(special or {})
    for role, i in special.items():
        if role not in ("mask", "bos", "eos", "pad") or not 0 <= i < config.vocab_size:
            raise ValueError(f"special must map mask/bos/eos/pad to ids in [0, {config.vocab_size - 1}], "
                             f"got {role!r}: {i!r}")
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"name must be a plain folder name such as 'ch07-gpt', got {name!r}")
    parent = Path(directory or os.environ.get(EXPORT_DIR_VARIABLE) or "browser_models")
    folder = parent / name
    start = time.perf_counter()
    save_pretrained(model, folder)
    onnx_path = export_onnx(model, folder / "model.onnx")
    seconds = time.perf_counter() - start
    ids = [torch.tensor([list(seq)], dtype=torch.long) for seq in example]
    diff = check_onnx(model, onnx_path, ids)
    if not diff <= tolerance:
        raise RuntimeError(f"ONNX Runtime's outputs differ from PyTorch's by {diff:.2e} on example, more than "
                           f"tolerance={tolerance}: {onnx_path} does not compute the model")
    n_params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    info = {
        "name": name, "kind": kind, "model": model_name, "tokens": list(tokens), "special": special,
        "vocab_size": config.vocab_size, "n_ctx": config.n_ctx, "n_heads": config.n_heads,
        "n_layers": config.n_layers, "n_decoder_layers": getattr(config, "n_decoder_layers", None),
        "d_model": config.d_model, "parameters": n_params,
        "inputs": list(inputs), "outputs": ["logits", *attention],
        "files": {f: (folder / f).stat().st_size for f in ("model.onnx", "model.safetensors", "config.json")},
        "check": {"example": [list(seq) for seq in example], "max_abs_diff": diff},
    }
    (folder / "browser.json").write_text(json.dumps(info, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return BrowserExport(name, folder, kind, info["files"]["model.onnx"], info["files"]["model.safetensors"],
                         n_params, diff, seconds)
