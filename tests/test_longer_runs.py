"""book/longer_runs: the longer runs behind the chapters' comparisons were made with the chapters'
own CPU settings (scripts/longer_runs.py), so a chapter that changes a compared setting without
running the script again fails here instead of quoting runs of another configuration."""

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNS = sorted((ROOT / "book" / "longer_runs").glob("*.json"))

# each setting of a results file: the name the chapter gives it, or an expression over those names
NAMES = {
    "04_normalization": dict(n_layers="RUN_LAYERS", d_model="RUN_D_MODEL", n_heads="RUN_HEADS", seq="RUN_SEQ",
                             batch="RUN_BATCH", steps="RUN_STEPS", lr="RUN_LR", warmup_fraction="WARMUP_FRACTION",
                             eval_batches="EVAL_BATCHES"),
    "05_positions": dict(train_len="TRAIN_LEN", steps="RUN_STEPS", batch="RUN_BATCH", d_model="RUN_D_MODEL",
                         n_layers="RUN_LAYERS", n_heads="RUN_HEADS", lr="RUN_LR", eval_batches="EVAL_BATCHES"),
    "06_weight_tying": dict(d_model="D_MODEL", n_layers="N_LAYERS", n_heads="N_HEADS", block_size="BLOCK_SIZE",
                            batch_size="BATCH_SIZE", steps="STEPS", lr="LR", eval_blocks="EVAL_BLOCKS"),
    "08_bert": dict(seq="SEQ", batch="BATCH", compare_batch="COMPARE_BATCH", d_model="D_MODEL", n_layers="N_LAYERS",
                    n_heads="N_HEADS", compare_steps="COMPARE_STEPS", lr="LR"),
    "08_bert_finetune": dict(seq="SEQ", batch="BATCH", d_model="D_MODEL", n_layers="N_LAYERS", n_heads="N_HEADS",
                             steps="STEPS", lr="LR", n_speakers="N_SPEAKERS", per_class="PER_CLASS",
                             ft_steps="FT_STEPS", ft_lr="FT_LR", ft_batch="FT_BATCH",
                             test_per_class="TEST_PER_CLASS"),
    "08_bert_nsp": dict(seq="SEQ", batch="BATCH", d_model="D_MODEL", n_layers="N_LAYERS", n_heads="N_HEADS",
                        steps="STEPS", lr="LR", nsp_steps="NSP_STEPS", nsp_lr="NSP_LR", nsp_batch="NSP_BATCH",
                        nsp_test="NSP_TEST"),
    "09_transformer": dict(min_len="MIN_LEN", max_len="MAX_LEN", steps="STEPS", batch="BATCH_SIZE", lr="LR",
                           num_beams="NUM_BEAMS", length_penalty="LENGTH_PENALTY", held_out="N_HELD_OUT"),
    "10_putting_it_together": dict(d_model="D_MODEL", n_layers="N_LAYERS", n_heads="N_HEADS",
                                   block_size="BLOCK_SIZE", race_steps="STEPS", race_batch="BATCH_SIZE",
                                   study_steps="STUDY_STEPS", study_batch="STUDY_BATCH", lr="LR",
                                   val_batches="VAL_BATCHES"),
}


# a results file whose name is not its chapter's: the chapter's notebook
NOTEBOOKS = {"08_bert_finetune": "08_bert", "08_bert_nsp": "08_bert"}


def cpu_settings(notebook: Path) -> dict:
    """The chapter's top-level assignments of constants, with the CPU branch of ``a if GPU else b``."""
    cells = json.loads(notebook.read_text())["cells"]
    source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    found: dict = {"GPU": False}
    for line in source.splitlines():
        m = re.match(r"^([A-Z_][A-Z0-9_]*(?:, [A-Z_][A-Z0-9_]*)*) = ([^#]+?)\s*(?:#.*)?$", line)
        if not m:
            continue
        try:
            value = eval(compile(ast.parse(m.group(2), mode="eval"), "<setting>", "eval"), {}, dict(found))
        except Exception:
            continue  # not a constant (a call, a name the chapter defines otherwise)
        names = m.group(1).split(", ")
        values = value if len(names) > 1 else (value,)
        if len(names) == len(values):
            found.update(zip(names, values))
    return found


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.stem)
def test_longer_runs_used_the_chapters_settings(path):
    record = json.loads(path.read_text())
    found = cpu_settings(ROOT / "book" / f"{NOTEBOOKS.get(path.stem, path.stem)}.ipynb")
    # JSON has lists where the chapter writes tuples
    expected = {key: list(v) if isinstance(v := found.get(name), tuple) else v for key, name in NAMES[path.stem].items()}
    actual = {key: record["settings"][key] for key in expected}
    assert actual == expected, f"run python scripts/longer_runs.py again: {path.name} was made with other settings"
    assert record["runs" if "runs" in record else "study"], "no runs recorded"


def test_every_results_file_is_checked():
    assert {p.stem for p in RUNS} <= set(NAMES)
