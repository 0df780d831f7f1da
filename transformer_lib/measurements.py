"""What each training chapter measured, per kind of hardware, so a chapter can say what to expect.

Used by the training chapters 6-10 (part II). A chapter calls :func:`record` after training; it
writes nothing unless ``TFS_RECORD_MEASUREMENTS`` names a JSON file (``scripts/measure_chapters.py``
sets it and runs the chapters). The results are kept in ``measurements.json`` next to this module,
one entry per chapter and hardware kind, and :func:`expected_table` shows them. A kind nobody has
measured yet says so: these numbers are measurements, never estimates.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch

from .speed import cpu_name

MEASUREMENTS_FILE = Path(__file__).with_name("measurements.json")
RECORD_ENV = "TFS_RECORD_MEASUREMENTS"
KINDS = ("CPU", "Colab T4", "large GPU")  # the rows every training chapter shows


def hardware() -> tuple[str, str]:
    """``(kind, description)`` of the device this process trains on: CUDA if present, else the CPU."""
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        return ("Colab T4" if "T4" in name else "large GPU"), name
    return "CPU", f"{cpu_name()}, {torch.get_num_threads()} thread(s)"


def load(path: str | os.PathLike | None = None) -> dict:
    """All measurements: ``{chapter: {kind: entry}}``."""
    path = Path(path or MEASUREMENTS_FILE)
    return json.loads(path.read_text()) if path.exists() else {}


def record(chapter: str, seconds: float, **results: float) -> bool:
    """Save this run's training ``seconds`` and ``results`` (e.g. ``val_loss=1.9``) for ``chapter``
    on this hardware, if ``TFS_RECORD_MEASUREMENTS`` is set. Returns whether it saved."""
    target = os.environ.get(RECORD_ENV)
    if not target:
        return False
    kind, description = hardware()
    data = load(target)
    data.setdefault(chapter, {})[kind] = {
        "device": description,
        "seconds": round(float(seconds), 1),
        "results": {k: round(float(v), 4) for k, v in results.items()},
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "load_average": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
    Path(target).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return True


def expected_table(chapter: str, labels: dict[str, str] | None = None, path: str | os.PathLike | None = None) -> str:
    """A Markdown table of ``chapter``'s measurements, one row per hardware kind.

    ``labels`` maps result names to column titles (and orders them); by default every recorded name.
    """
    entries = load(path).get(chapter, {})
    if labels is None:
        labels = {k: k for entry in entries.values() for k in entry["results"]}
    rows = ["| hardware | measured on | " + " | ".join(labels.values()) + " | training time |",
            "|---|---|" + "---:|" * len(labels) + "---:|"]
    for kind in KINDS:
        entry = entries.get(kind)
        if entry is None:
            rows.append(f"| {kind} | not measured yet | " + " | ".join("" for _ in labels) + " | |")
            continue
        values = " | ".join(f"{entry['results'][k]:.3f}" if k in entry["results"] else "" for k in labels)
        # the load average: the training time is wall-clock time, which other programs stretch
        busy = f", load {entry['load_average']:.1f}" if entry.get("load_average") is not None else ""
        rows.append(f"| {kind} | {entry['device']} (torch {entry['torch']}, {entry['date']}{busy}) "
                    f"| {values} | {entry['seconds']:.0f} s |")
    return "\n".join(rows)
