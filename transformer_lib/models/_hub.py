"""Fetching reference checkpoints from the Hugging Face Hub (needs ``transformers`` and a network)."""

from __future__ import annotations


def load_hf_model(class_name: str, model_name: str):
    """``transformers.<class_name>.from_pretrained(model_name)`` with errors a reader can act on."""
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"loading pretrained weights needs Hugging Face transformers: pip install transformers ({e})"
        ) from e
    try:
        return getattr(transformers, class_name).from_pretrained(model_name)
    except OSError as e:
        raise RuntimeError(
            f"could not fetch {model_name!r} from the Hugging Face Hub: no network, HF_HUB_OFFLINE=1, "
            f"or a wrong name. Pretrained weights need internet access (Colab has it); everything "
            f"else in the book runs offline. Cause: {type(e).__name__}: {str(e).splitlines()[0]}"
        ) from e
