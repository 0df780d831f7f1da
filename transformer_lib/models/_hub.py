"""Fetching reference checkpoints from the Hugging Face Hub (needs ``transformers`` and a network)."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse


# Hugging Face activation names -> ours (layers/feedforward.py)
HF_ACTIVATIONS = {
    "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "gelu_python": "gelu", "relu": "relu",
}


def hf_activation(name: str) -> str:
    if name not in HF_ACTIVATIONS:
        raise ValueError(f"unsupported activation {name!r}; known: {sorted(HF_ACTIVATIONS)}")
    return HF_ACTIVATIONS[name]


def hub_reachable(timeout: float = 3.0) -> bool:
    """Can we open a connection to the Hub? (Behind a proxy we cannot tell, so we say yes and let the download try.)"""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def load_hf_model(class_name: str, model_name: str):
    """``transformers.<class_name>.from_pretrained(model_name)`` with errors a reader can act on.

    A model already in the local Hugging Face cache loads without a network. Otherwise, with no
    route to the Hub we fail at once rather than after the download's retries.
    """
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"loading pretrained weights needs Hugging Face transformers: pip install transformers ({e})") from e
    cls = getattr(transformers, class_name)
    try:
        return cls.from_pretrained(model_name, local_files_only=True)
    except OSError:
        pass  # not cached: download
    hint = (
        "Pretrained weights need internet access (Colab has it); everything else in the book runs offline."
    )
    if not hub_reachable():
        raise RuntimeError(
            f"could not fetch {model_name!r} from the Hugging Face Hub: it is not reachable from this machine "
            f"(no network, or HF_HUB_OFFLINE=1), and the model is not in the local cache. {hint}"
        )
    try:
        return cls.from_pretrained(model_name)
    except OSError as e:
        raise RuntimeError(
            f"could not fetch {model_name!r} from the Hugging Face Hub (a wrong name, or the network failed). {hint} "
            f"Cause: {type(e).__name__}: {str(e).splitlines()[0]}"
        ) from e
