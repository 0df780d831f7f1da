"""Longer and more-seed runs behind the chapters' comparisons, too long for a chapter's CPU budget.

A chapter compares variants at a budget its CPU time allows. Whether its verdict holds at longer
budgets and over more seeds is measured here, off the chapter, with the chapter's own CPU
configuration (the same data, model, batches, schedule and evaluation), and written to
``book/longer_runs/<chapter>.json`` with the command, date, machine and load. The chapter reads
that file where it is present (not in Colab, which has the notebook alone), checks that its
settings are the chapter's, and draws and quotes it beside its own run.

    python scripts/longer_runs.py ch04 --seeds 10   # post-norm, pre-norm, warm-up: 10 seeds x 1, 4
    python scripts/longer_runs.py ch05              # positions read past the training length: 5 seeds x 1, 4
    python scripts/longer_runs.py ch06              # tied vs untied: 5 seeds x 1, 2, 4, 8 x the steps
    python scripts/longer_runs.py ch08              # original vs Cramming BERT: seeds x budgets x peak lrs
    python scripts/longer_runs.py ch08ft            # BERT fine-tuned vs from scratch: 5 seeds x 1, 4 x the steps
    python scripts/longer_runs.py ch08nsp           # next-sentence prediction against chance: 5 seeds x 1, 4
    python scripts/longer_runs.py ch09              # reversal: exact match over training, 5 seeds
    python scripts/longer_runs.py ch10              # GPT-2, single swaps, LLaMA-style: seeds x budgets
    python scripts/longer_runs.py ch06 --seeds 3 --multiples 1 2   # fewer (a quick check)

Runs use one CPU thread and deterministic algorithms, as the chapters do on a CPU, so a run at the
chapter's own budget repeats the chapter's numbers exactly (the chapters check this). Run it on a
quiet machine; the load average is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import transformer_lib as tl  # noqa: E402
from transformer_lib.speed import cpu_name  # noqa: E402

OUT = ROOT / "book" / "longer_runs"
NAMES = {"ch04": "04_normalization", "ch05": "05_positions", "ch06": "06_weight_tying", "ch08": "08_bert",
         "ch08ft": "08_bert_finetune", "ch08nsp": "08_bert_nsp", "ch09": "09_transformer", "ch10": "10_putting_it_together"}


def load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else []


def header(chapter: str, argv: list[str], settings: dict) -> dict:
    """The record to fill: the file's, to extend, when it holds runs with the same settings (a later
    command adds budgets, seeds or learning rates and skips the runs it already has), else a new one."""
    command = "python scripts/longer_runs.py " + " ".join(argv)
    path = OUT / f"{NAMES[chapter]}.json"
    if path.exists():
        old = json.loads(path.read_text())
        if old.get("settings") == settings:
            old["commands"] = old.get("commands", [old.pop("command", None)] if "command" in old else []) + [command]
            before = old.get("load_before", [])
            before = before if not before or isinstance(before[0], list) else [before]  # one list per command
            old.update(date=time.strftime("%Y-%m-%d"), load_before=before + [load()],
                       cpu_seconds_before=old.get("cpu_seconds", 0.0))
            return old
    return {"chapter": NAMES[chapter], "commands": [command], "date": time.strftime("%Y-%m-%d"),
            "machine": f"{cpu_name()}, {torch.get_num_threads()} thread(s)", "torch": torch.__version__,
            "python": platform.python_version(), "load_before": [load()], "settings": settings}


def have(runs: list[dict], **key) -> bool:
    """Whether ``runs`` already holds the run that ``key`` describes."""
    return any(all(r.get(k) == v for k, v in key.items()) for r in runs)


def save(chapter: str, record: dict, started: float) -> Path:
    record["load_after"] = load()
    record["cpu_seconds"] = record.get("cpu_seconds_before", 0.0) + round(time.process_time() - started, 1)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{NAMES[chapter]}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
    return path


def log(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


# ---- chapter 4: post-norm and pre-norm, with and without warm-up ------------------------------

CH04_VARIANTS = {"post-norm, no warm-up": ("post", False), "post-norm, warm-up": ("post", True),
                 "pre-norm, no warm-up": ("pre", False), "pre-norm, warm-up": ("pre", True)}


def xavier_init_(model: torch.nn.Module) -> None:
    """As chapter 4: Xavier-uniform linear weights, zero biases, unit-scale token embeddings."""
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
    torch.nn.init.normal_(model.token_embedding.weight, std=1.0)


def ch04(args, argv) -> None:
    settings = dict(n_layers=6, d_model=32, n_heads=4, seq=32, batch=8, steps=50, lr=1e-2, warmup_fraction=0.2,
                    eval_batches=8)
    s = settings
    text = tl.load_tiny_shakespeare()
    tok = tl.CharTokenizer.from_text(text)
    train_ids, val_ids = tl.train_val_split(torch.tensor(tok.encode(text)), 0.1)
    sampler = tl.BatchSampler(val_ids, s["batch"], s["seq"], seed=1234)
    eval_batches = [sampler() for _ in range(s["eval_batches"])]  # as the chapter: fixed validation batches
    counts = torch.bincount(train_ids, minlength=tok.vocab_size).double() + 1
    targets = torch.cat([y.flatten() for _, y in eval_batches])
    unigram = -(counts / counts.sum()).log()[targets].mean().item()

    class StepLosses(tl.Callback):
        def __init__(self):
            self.losses = []

        def on_step(self, state, model):
            self.losses.append(state.loss.float().item())

    @torch.no_grad()
    def val_loss(model) -> float:
        model.eval()
        return sum(model.loss(x, y).item() for x, y in eval_batches) / len(eval_batches)

    record = header("ch04", argv, settings)
    record.setdefault("runs", [])
    record.update(unigram_val=round(unigram, 4))
    started = time.process_time()
    for multiple in args.multiples or (1, 4):
        steps = s["steps"] * multiple
        for seed in range(args.seeds):
            for variant, (position, warm) in CH04_VARIANTS.items():
                if have(record["runs"], variant=variant, seed=seed, multiple=multiple):
                    continue
                torch.manual_seed(seed)
                model = tl.GPT2(tl.GPT2Config(vocab_size=tok.vocab_size, n_ctx=s["seq"], d_model=s["d_model"],
                                              n_layers=s["n_layers"], n_heads=s["n_heads"], norm_position=position,
                                              ffn="relu", tie_weights=False))
                xavier_init_(model)
                curve = StepLosses()
                warmup = int(steps * s["warmup_fraction"]) if warm else 0
                tl.train(model, tl.BatchSampler(train_ids, s["batch"], s["seq"], seed=seed), None,
                         tl.TrainConfig(max_steps=steps, lr=s["lr"], warmup_steps=warmup, betas=(0.9, 0.98),
                                        grad_clip=None, eval_interval=steps, eval_steps=1, progress=False,
                                        device="cpu", seed=seed), callbacks=[curve])
                final = val_loss(model)
                record["runs"].append(dict(
                    variant=variant, seed=seed, multiple=multiple, steps=steps, warmup_steps=warmup,
                    val=round(final, 4) if math.isfinite(final) else None,
                    losses=[round(v, 3) if math.isfinite(v) else None for v in curve.losses]))
                log(f"ch04 x{multiple} seed {seed} {variant}: {final:.4f}")
            save("ch04", record, started)


# ---- chapter 5: train short, read long ----------------------------------------------------------

def ch05(args, argv) -> None:
    settings = dict(train_len=32, steps=150, batch=16, d_model=64, n_layers=2, n_heads=4, lr=3e-3, eval_batches=32,
                    schemes=["learned", "rope", "alibi", "none"])
    s = settings
    text = tl.load_tiny_shakespeare()
    tok = tl.CharTokenizer.from_text(text)
    train_ids, val_ids = tl.train_val_split(torch.tensor(tok.encode(text)), 0.1)
    longest = 4 * s["train_len"]
    sampler = tl.BatchSampler(val_ids, s["batch"], longest, seed=1234)
    eval_batches = [sampler() for _ in range(s["eval_batches"])]  # as the chapter: windows 4 x train_len
    bands = {"1x": (0, s["train_len"]), "late": (s["train_len"] - 8, s["train_len"]),  # the last 8 inside
             "2x": (s["train_len"], 2 * s["train_len"]), "4x": (2 * s["train_len"], longest)}

    @torch.no_grad()
    def loss_by_position(model, length):
        reader = tl.GPT2(replace(model.config, n_ctx=length)).eval()
        reader.load_state_dict(model.state_dict())
        return torch.stack([F.cross_entropy(reader(x[:, :length]).transpose(1, 2), y[:, :length], reduction="none")
                            .mean(0) for x, y in eval_batches]).mean(0)

    record = header("ch05", argv, settings)
    record.setdefault("runs", [])
    started = time.process_time()
    for multiple in args.multiples or (1, 4):
        steps = s["steps"] * multiple
        for seed in range(args.seeds):
            for positional in s["schemes"]:
                if have(record["runs"], scheme=positional, seed=seed, multiple=multiple):
                    continue
                torch.manual_seed(seed)
                model = tl.GPT2(tl.GPT2Config(vocab_size=tok.vocab_size, n_ctx=s["train_len"], d_model=s["d_model"],
                                              n_layers=s["n_layers"], n_heads=s["n_heads"], positional=positional,
                                              use_sdpa=True))
                tl.train(model, tl.BatchSampler(train_ids, s["batch"], s["train_len"], seed=seed + 1), None,
                         tl.TrainConfig(max_steps=steps, lr=s["lr"], warmup_steps=steps // 10, device="cpu",
                                        eval_interval=steps, eval_steps=1, progress=False, seed=seed))
                curve = loss_by_position(model.eval(), s["train_len"] if positional == "learned" else longest)
                means = {b: round(curve[lo:hi].mean().item(), 4) for b, (lo, hi) in bands.items() if hi <= len(curve)}
                record["runs"].append(dict(scheme=positional, seed=seed, multiple=multiple, steps=steps, **means))
                log(f"ch05 x{multiple} seed {seed} {positional}: {means}")
            save("ch05", record, started)


# ---- chapter 6: tied against untied -----------------------------------------------------------

def fixed_blocks(data: torch.Tensor, block_size: int, n_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """As chapter 6: n_blocks evenly spaced (inputs, targets) blocks, (n_blocks, block_size) each."""
    n_blocks = min(n_blocks, (len(data) - 1) // block_size)
    starts = torch.linspace(0, len(data) - block_size - 1, n_blocks).long()
    blocks = data[starts[:, None] + torch.arange(block_size + 1)]
    return blocks[:, :-1], blocks[:, 1:]


@torch.no_grad()
def block_losses(model, inputs, targets, chunk: int = 16) -> torch.Tensor:
    """As chapter 6: (n_blocks,) mean cross-entropy of each block, in eval mode."""
    model.eval()
    losses = []
    for x, y in zip(inputs.split(chunk), targets.split(chunk)):
        logits = model(x).float()
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")
        losses.append(loss.view(len(x), -1).mean(dim=1))
    return torch.cat(losses)


def ch06(args, argv) -> None:
    settings = dict(d_model=32, n_layers=2, n_heads=4, block_size=64, batch_size=4, steps=150, lr=3e-3,
                    eval_blocks=128)
    s = settings
    enc = tl.gpt2_tokenizer()
    used, ids = torch.unique(torch.tensor(enc.encode(tl.load_tiny_shakespeare())), return_inverse=True)
    V = len(used)
    train_ids, val_ids = tl.train_val_split(ids, val_fraction=0.1)
    blocks = {"train": fixed_blocks(train_ids, s["block_size"], s["eval_blocks"]),
              "val": fixed_blocks(val_ids, s["block_size"], s["eval_blocks"])}
    # the unigram baseline: training-set token frequencies (add-one, so that no token has
    # probability 0), scored on the same validation blocks as the models
    counts = torch.bincount(train_ids, minlength=V).double() + 1
    unigram = -(counts / counts.sum()).log()[blocks["val"][1]].mean().item()
    record = header("ch06", argv, settings)
    record.setdefault("runs", [])
    record.update(vocab=V, train_tokens=len(train_ids), unigram_val=round(unigram, 4))
    started = time.process_time()
    for multiple in args.multiples or (1, 2, 4, 8):
        steps = s["steps"] * multiple
        config = tl.TrainConfig(max_steps=steps, lr=s["lr"], warmup_steps=steps // 10, eval_interval=steps // 5,
                                eval_steps=2, progress=False, device="cpu")
        for seed in range(args.seeds):
            for variant, tie in (("tied", True), ("untied", False)):
                if have(record["runs"], variant=variant, seed=seed, multiple=multiple):
                    continue
                torch.manual_seed(seed)
                model = tl.GPT2(tl.GPT2Config(vocab_size=V, n_ctx=s["block_size"], d_model=s["d_model"],
                                              n_layers=s["n_layers"], n_heads=s["n_heads"], tie_weights=tie))
                cpu = time.process_time()
                state = tl.train(model, tl.BatchSampler(train_ids, s["batch_size"], s["block_size"], seed=seed),
                                 tl.BatchSampler(val_ids, s["batch_size"], s["block_size"], seed=seed + 1),
                                 replace(config, seed=seed))
                losses = {k: block_losses(model, *b).mean().item() for k, b in blocks.items()}
                record["runs"].append(dict(
                    variant=variant, seed=seed, multiple=multiple, steps=steps,
                    tokens_seen=steps * s["batch_size"] * s["block_size"],
                    val=round(losses["val"], 4), train=round(losses["train"], 4),
                    cpu_seconds=round(time.process_time() - cpu, 1),
                    history=[dict(step=h["step"], val=round(h["val_loss"], 4), train=round(h["train_loss"], 4))
                             for h in state.history]))
                log(f"ch06 x{multiple} seed {seed} {variant}: val {losses['val']:.4f}")
            save("ch06", record, started)  # after every seed: a long job keeps what it has


# ---- chapter 8: the original BERT recipe and Cramming's ----------------------------------------

def ch08(args, argv) -> None:
    settings = dict(seq=16, batch=64, compare_batch=32, d_model=64, n_layers=2, n_heads=4, compare_steps=400,
                    lr=5e-3, heldout_batches=16)
    s = settings
    text = tl.load_tiny_shakespeare()
    tok = tl.CharTokenizer.from_text(text)
    mask_id, vocab = tok.vocab_size, tok.vocab_size + 1  # [MASK] gets the first free id
    train_ids, val_ids = tl.train_val_split(torch.tensor(tok.encode(text)), val_fraction=0.1)
    counts = torch.bincount(train_ids, minlength=vocab).double()
    p = counts[counts > 0] / counts.sum()
    unigram = -(p * p.log()).sum().item()

    def mlm_batches(split, seed, batch):  # as chapter 8: random windows, then the collator
        windows = tl.BatchSampler(split, batch, s["seq"], seed=seed)
        collator = tl.MLMCollator(vocab, mask_id, seed=seed)
        return lambda: collator(windows()[0])

    heldout = mlm_batches(val_ids, 1, s["batch"])
    heldout = [heldout() for _ in range(s["heldout_batches"])]  # the chapter's fixed held-out set

    @torch.no_grad()
    def heldout_loss(model) -> float:
        model.eval()
        losses = []
        for b in heldout:
            where = b["labels"] != tl.IGNORE_INDEX
            logits = model(b["input_ids"], masked_positions=where)
            losses.append(F.cross_entropy(logits.float(), b["labels"][where], reduction="none"))
        return torch.cat(losses).mean().item()

    small = dict(vocab_size=vocab, n_ctx=s["seq"], d_model=s["d_model"], n_layers=s["n_layers"],
                 n_heads=s["n_heads"], mask_token_id=mask_id, use_sdpa=True)
    recipes = {"original": tl.BERTConfig(**small), "Cramming": tl.BERTConfig.cramming(**small)}
    record = header("ch08", argv, settings)
    record.setdefault("runs", [])
    record.update(unigram=round(unigram, 4))
    started = time.process_time()
    for lr in args.lrs or (s["lr"], s["lr"] / 5, 2 * s["lr"]):
        for multiple in args.multiples or (1, 4, 8):
            steps = s["compare_steps"] * multiple
            config = tl.TrainConfig(max_steps=steps, lr=lr, warmup_steps=steps // 10, eval_interval=steps,
                                    eval_steps=1, device="cpu", progress=False)
            for seed in range(args.seeds):
                for name, cfg in recipes.items():
                    if have(record["runs"], recipe=name, seed=seed, lr=lr, multiple=multiple):
                        continue
                    torch.manual_seed(seed)
                    model = tl.BERT(cfg)
                    tl.train(model, mlm_batches(train_ids, seed, s["compare_batch"]), None, replace(config, seed=seed))
                    loss = heldout_loss(model)
                    record["runs"].append(dict(recipe=name, seed=seed, lr=lr, multiple=multiple, steps=steps,
                                               val=round(loss, 4) if math.isfinite(loss) else None))
                    log(f"ch08 lr {lr:g} x{multiple} seed {seed} {name}: {loss:.4f}")
                save("ch08", record, started)


# ---- chapter 8: fine-tuning the pre-trained BERT against the same model from scratch ------------------

def ch08_pretrained(s: dict):
    """Chapter 8's first model, trained as the chapter trains it (the start of ch08ft and ch08nsp):
    text, tokenizer, [MASK] id, vocabulary size with it, train and validation ids, the model, and the
    MLM batches (split, seed) -> a batch function."""
    text = tl.load_tiny_shakespeare()
    tok = tl.CharTokenizer.from_text(text)
    mask_id = tok.vocab_size
    vocab = mask_id + 1
    train_ids, val_ids = tl.train_val_split(torch.tensor(tok.encode(text)), val_fraction=0.1)

    def mlm_batches(split, seed):  # as chapter 8: random windows, then the collator
        windows = tl.BatchSampler(split, s["batch"], s["seq"], seed=seed)
        collator = tl.MLMCollator(vocab, mask_id, seed=seed)
        return lambda: collator(windows()[0])

    small = dict(vocab_size=vocab, n_ctx=s["seq"], d_model=s["d_model"], n_layers=s["n_layers"],
                 n_heads=s["n_heads"], mask_token_id=mask_id, use_sdpa=True)
    torch.manual_seed(0)
    pretrained = tl.BERT(tl.BERTConfig(**small))
    tl.train(pretrained, mlm_batches(train_ids, 0), mlm_batches(val_ids, 1),
             tl.TrainConfig(max_steps=s["steps"], lr=s["lr"], warmup_steps=s["steps"] // 10,
                            eval_interval=s["steps"] // 10, eval_steps=8, device="cpu", progress=False, seed=0))
    return text, tok, mask_id, vocab, train_ids, val_ids, pretrained.eval(), mlm_batches


def ch08ft(args, argv) -> None:
    from transformer_lib.data import sentence_tasks as st
    from transformer_lib.models.bert import with_new_tokens

    settings = dict(seq=16, batch=64, d_model=64, n_layers=2, n_heads=4, steps=1000, lr=5e-3, n_speakers=2,
                    per_class=[16, 64, 256], ft_steps=100, ft_lr=1e-3, ft_batch=32, test_per_class=140)
    s = settings
    text, tok, mask_id, vocab, train_ids, val_ids, pretrained, mlm_batches = ch08_pretrained(s)
    cls_id, sep_id = vocab, vocab + 1

    data = st.speaker_lines(text, s["n_speakers"])
    test = st.balanced(data["test"], s["test_per_class"], seed=0)
    test_enc = st.encode_lines([line for line, _ in test], tok.encode, cls_id, sep_id, s["seq"])
    test_y = torch.tensor([c for _, c in test])

    def fine_tune(from_pretrained: bool, per_class: int, seed: int, steps: int) -> float:  # as chapter 8
        torch.manual_seed(seed)
        encoder = (with_new_tokens(pretrained, 2, seed=seed) if from_pretrained
                   else tl.BERT(replace(pretrained.config, vocab_size=vocab + 2)))
        classifier = tl.BERTForSequenceClassification(encoder, s["n_speakers"], dropout=0.1)
        labelled = st.balanced(data["train"], per_class, seed=seed)
        enc = st.encode_lines([line for line, _ in labelled], tok.encode, cls_id, sep_id, s["seq"])
        y = torch.tensor([c for _, c in labelled])
        g = torch.Generator().manual_seed(seed)

        def batches() -> dict:
            pick = torch.randint(0, len(y), (min(s["ft_batch"], len(y)),), generator=g)
            return dict(input_ids=enc["input_ids"][pick], attention_mask=enc["attention_mask"][pick],
                        labels=y[pick])

        config = tl.TrainConfig(max_steps=steps, lr=s["ft_lr"], warmup_steps=steps // 10, weight_decay=0.01,
                                eval_interval=steps, device="cpu", progress=False, seed=seed)
        tl.train(classifier, batches, None, config, loss_fn=lambda m, b: m.loss(**b))
        classifier.eval()
        with torch.no_grad():
            guess = classifier(test_enc["input_ids"], test_enc["attention_mask"]).argmax(-1)
        return (guess == test_y).float().mean().item()

    record = header("ch08ft", argv, settings)
    record.setdefault("runs", [])
    record.update(speakers=data["speakers"], chance=st.majority_share(test))
    started = time.process_time()
    for multiple in args.multiples or (1, 4):
        steps = s["ft_steps"] * multiple
        for seed in range(args.seeds):
            for per_class in s["per_class"]:
                for start, from_pretrained in (("pre-trained", True), ("from scratch", False)):
                    if have(record["runs"], start=start, seed=seed, multiple=multiple, per_class=per_class):
                        continue
                    accuracy = fine_tune(from_pretrained, per_class, seed, steps)
                    record["runs"].append(dict(start=start, seed=seed, multiple=multiple, steps=steps,
                                               per_class=per_class, accuracy=round(accuracy, 4)))
                    log(f"ch08ft x{multiple} seed {seed} {per_class}/class {start}: {accuracy:.4f}")
            save("ch08ft", record, started)


def ch08nsp(args, argv) -> None:
    """Chapter 8's short MLM + NSP run from its pre-trained BERT: held-out NSP accuracy against chance."""
    from transformer_lib.data import sentence_tasks as st
    from transformer_lib.models.bert import with_new_tokens

    settings = dict(seq=16, batch=64, d_model=64, n_layers=2, n_heads=4, steps=1000, lr=5e-3, nsp_steps=100,
                    nsp_lr=1e-3, nsp_batch=32, nsp_test=1000)
    s = settings
    text, tok, mask_id, vocab, train_ids, val_ids, pretrained, mlm_batches = ch08_pretrained(s)
    cls_id, sep_id = vocab, vocab + 1

    cut = len(train_ids)
    train_pairs = st.nsp_pairs(text[:cut], 20_000, seed=0)
    test_pairs = st.nsp_pairs(text[cut:], s["nsp_test"], seed=1)
    enc = st.encode_pairs([(a, b) for a, b, _ in train_pairs], tok.encode, cls_id, sep_id, s["seq"])
    y = torch.tensor([label for _, _, label in train_pairs])
    test_enc = st.encode_pairs([(a, b) for a, b, _ in test_pairs], tok.encode, cls_id, sep_id, s["seq"])
    test_y = torch.tensor([label for _, _, label in test_pairs])

    def train_nsp(seed: int, steps: int) -> float:  # as chapter 8
        torch.manual_seed(seed)
        pretraining = tl.BERTForPreTraining(with_new_tokens(pretrained, 2, seed=seed))
        collator = tl.MLMCollator(vocab + 2, mask_id, special_ids=(cls_id, sep_id), pad_token_id=0, seed=seed)
        g = torch.Generator().manual_seed(seed)

        def batches() -> dict:
            pick = torch.randint(0, len(y), (s["nsp_batch"],), generator=g)
            masked = collator(enc["input_ids"][pick])
            return dict(input_ids=masked["input_ids"], labels=masked["labels"],
                        attention_mask=enc["attention_mask"][pick], token_type_ids=enc["token_type_ids"][pick],
                        next_sentence_label=y[pick])

        config = tl.TrainConfig(max_steps=steps, lr=s["nsp_lr"], warmup_steps=steps // 10, weight_decay=0.01,
                                eval_interval=steps, device="cpu", progress=False, seed=seed)
        tl.train(pretraining, batches, None, config, loss_fn=lambda m, b: m.loss(**b))
        pretraining.eval()
        with torch.no_grad():
            _, logits = pretraining(test_enc["input_ids"], test_enc["attention_mask"], test_enc["token_type_ids"])
        return (logits.argmax(-1) == test_y).float().mean().item()

    record = header("ch08nsp", argv, settings)
    record.setdefault("runs", [])
    record.update(chance=0.5)
    started = time.process_time()
    for multiple in args.multiples or (1, 4):
        steps = s["nsp_steps"] * multiple
        for seed in range(args.seeds):
            if have(record["runs"], seed=seed, multiple=multiple):
                continue
            accuracy = train_nsp(seed, steps)
            record["runs"].append(dict(seed=seed, multiple=multiple, steps=steps, accuracy=round(accuracy, 4)))
            log(f"ch08nsp x{multiple} seed {seed}: {accuracy:.4f}")
        save("ch08nsp", record, started)


# ---- chapter 9: reversing digit strings, exact match over training -----------------------------

def ch09(args, argv) -> None:
    settings = dict(min_len=3, max_len=8, d_model=64, n_layers=2, n_heads=4, d_ff=128, steps=300, batch=64,
                    lr=3e-3, warmup=50, held_out=500, num_beams=4, length_penalty=0.6, every=25)
    s = settings
    tokens = list("0123456789") + ["<pad>", "<bos>", "<eos>"]
    pad, bos, eos = tokens.index("<pad>"), tokens.index("<bos>"), tokens.index("<eos>")
    config = tl.EncoderDecoderConfig(vocab_size=len(tokens), n_ctx=32, d_model=s["d_model"], n_layers=s["n_layers"],
                                     n_heads=s["n_heads"], d_ff=s["d_ff"], dropout=0.0)

    def sample_digits(n, generator):  # as chapter 9
        lengths = torch.randint(s["min_len"], s["max_len"] + 1, (n,), generator=generator)
        digits = torch.randint(0, 10, (n, s["max_len"]), generator=generator)
        return [digits[i, : lengths[i]].tolist() for i in range(n)]

    def collate(sources):
        n, S = len(sources), max(len(x) for x in sources)
        src, src_mask = torch.full((n, S), pad), torch.zeros(n, S, dtype=torch.long)
        tgt_in, tgt_out = torch.full((n, S + 1), pad), torch.full((n, S + 1), tl.IGNORE_INDEX)
        for i, x in enumerate(sources):
            y = x[::-1]
            src[i, : len(x)], src_mask[i, : len(x)] = torch.tensor(x), 1
            tgt_in[i, : len(y) + 1], tgt_out[i, : len(y) + 1] = torch.tensor([bos] + y), torch.tensor(y + [eos])
        return src, src_mask, tgt_in, tgt_out

    held_out = [list(x) for x in dict.fromkeys(
        tuple(x) for x in sample_digits(s["held_out"], torch.Generator().manual_seed(1234)))]
    held_out_set = {tuple(x) for x in held_out}

    def training_batches(seed):
        g = torch.Generator().manual_seed(seed)
        return lambda: collate([x for x in sample_digits(s["batch"], g) if tuple(x) not in held_out_set])

    def held_out_batches(seed):
        g = torch.Generator().manual_seed(seed)
        return lambda: collate([held_out[i] for i in torch.randint(len(held_out), (64,), generator=g)])

    def seq2seq_loss(model, batch, label_smoothing=0.0):
        src, src_mask, tgt_in, tgt_out = batch
        return model.loss(src, tgt_in, tgt_out, src_attention_mask=src_mask, label_smoothing=label_smoothing)

    src, src_mask, _, _ = collate(held_out)

    def exact_match(model, num_beams) -> float:
        out = model.generate(src, bos, max(len(x) for x in held_out) + 1, eos, src_attention_mask=src_mask,
                             num_beams=num_beams, length_penalty=s["length_penalty"], pad_token_id=pad)
        rows = out[:, 1:].tolist()
        preds = [row[: row.index(eos)] if eos in row else None for row in rows]
        return sum(p == x[::-1] for x, p in zip(held_out, preds)) / len(held_out)

    class Curve(tl.Callback):  # exact match of greedy and beam decoding every `every` steps
        def __init__(self):
            self.points = []

        def on_eval(self, state, model):
            if state.step % s["every"] == 0:
                self.points.append(dict(step=state.step, greedy=round(exact_match(model, 1), 4),
                                        beam=round(exact_match(model, s["num_beams"]), 4)))
                model.train()

    base = tl.TrainConfig(max_steps=s["steps"], lr=s["lr"], warmup_steps=s["warmup"], eval_interval=s["every"],
                          eval_steps=2, device="cpu", progress=False)
    recipes = {"cosine": base,  # the chapter's first run, then the paper's recipe
               "paper": replace(base, schedule="inverse_sqrt", betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0,
                                label_smoothing=0.1, grad_clip=None)}
    record = header("ch09", argv, settings)
    record.setdefault("runs", [])
    record.update(held_out_strings=len(held_out))
    started = time.process_time()
    for seed in range(args.seeds):
        for name, config_ in recipes.items():
            if have(record["runs"], recipe=name, seed=seed):
                continue
            torch.manual_seed(seed)
            model = tl.EncoderDecoder(config)
            curve = Curve()
            tl.train(model, training_batches(seed), held_out_batches(1), replace(config_, seed=seed),
                     loss_fn=seq2seq_loss, callbacks=[curve])
            record["runs"].append(dict(recipe=name, seed=seed, curve=curve.points))
            log(f"ch09 seed {seed} {name}: " + ", ".join(f"{p['step']}: {p['greedy']:.2f}/{p['beam']:.2f}"
                                                          for p in curve.points[::4]))
        save("ch09", record, started)


# ---- chapter 10: GPT-2, single swaps and the LLaMA-style decoder ------------------------------

LLAMA = dict(norm="rmsnorm", positional="rope", ffn="swiglu", bias=False, tie_weights=False)
STUDY = {"GPT-2": {}, "+ RMSNorm": dict(norm="rmsnorm"), "+ RoPE": dict(positional="rope"),
         "+ SwiGLU": dict(ffn="swiglu"), "LLaMA-style": LLAMA}


def ch10(args, argv) -> None:
    settings = dict(d_model=96, n_layers=2, n_heads=4, block_size=64, race_steps=300, race_batch=16,
                    study_steps=100, study_batch=8, lr=3e-3, val_batches=40)
    s = settings
    text = tl.load_tiny_shakespeare()
    tok = tl.CharTokenizer.from_text(text)
    train_ids, val_ids = tl.train_val_split(torch.tensor(tok.encode(text)), val_fraction=0.1)
    sizes = dict(vocab_size=tok.vocab_size, n_ctx=s["block_size"], d_model=s["d_model"], n_layers=s["n_layers"],
                 n_heads=s["n_heads"], use_sdpa=True)
    val_sampler = tl.BatchSampler(val_ids, s["race_batch"], s["block_size"], seed=1234)
    eval_batches = [val_sampler() for _ in range(s["val_batches"])]  # the chapter's fixed validation set
    train_config = tl.TrainConfig(max_steps=s["race_steps"], lr=s["lr"], warmup_steps=s["race_steps"] // 10,
                                  eval_interval=s["race_steps"] // 6, eval_steps=8, device="cpu", progress=False)

    @torch.no_grad()
    def fixed_loss(model) -> float:
        model.eval()
        return torch.stack([model.loss(x, y) for x, y in eval_batches]).mean().item()

    record = header("ch10", argv, settings)
    record.setdefault("race", [])
    record.setdefault("study", [])
    started = time.process_time()
    # 600 and 1,200 steps: the budgets of the records made when the study ran 150 steps (multiples 4 and 8)
    for multiple in args.multiples or (1, 6, 12):
        for seed in range(args.seeds):  # the study: every variant, short runs of study_batch sequences
            steps = s["study_steps"] * multiple
            for name, swaps in STUDY.items():
                if name not in (args.variants or STUDY) or have(record["study"], variant=name, seed=seed,
                                                                multiple=multiple):
                    continue
                torch.manual_seed(seed)
                model = tl.GPT2(tl.GPT2Config(**sizes, **swaps))
                batches = tl.BatchSampler(train_ids, s["study_batch"], s["block_size"], seed=seed + 1)
                tl.train(model, batches, None, replace(train_config, max_steps=steps, warmup_steps=steps // 10,
                                                       eval_interval=steps, eval_steps=1, seed=seed))
                loss = fixed_loss(model)
                record["study"].append(dict(variant=name, seed=seed, multiple=multiple, steps=steps,
                                            val=round(loss, 4)))
                log(f"ch10 study x{multiple} seed {seed} {name}: {loss:.4f}")
            save("ch10", record, started)
    for multiple in (1, 4) if args.race_multiples is None else args.race_multiples:
        for seed in range(args.seeds):  # the race: GPT-2 and LLaMA-style at the race's batch
            steps = s["race_steps"] * multiple
            for name in ("GPT-2", "LLaMA-style"):
                if have(record["race"], variant=name, seed=seed, multiple=multiple):
                    continue
                torch.manual_seed(seed)
                model = tl.GPT2(tl.GPT2Config(**sizes, **STUDY[name]))
                state = tl.train(model, tl.BatchSampler(train_ids, s["race_batch"], s["block_size"], seed=seed + 1),
                                 tl.BatchSampler(val_ids, s["race_batch"], s["block_size"], seed=seed + 2),
                                 replace(train_config, max_steps=steps, warmup_steps=steps // 10,
                                         eval_interval=max(1, steps // 6), seed=seed))
                loss = fixed_loss(model)
                record["race"].append(dict(
                    variant=name, seed=seed, multiple=multiple, steps=steps, val=round(loss, 4),
                    history=[dict(step=h["step"], val=round(h["val_loss"], 4)) for h in state.history]))
                log(f"ch10 race x{multiple} seed {seed} {name}: {loss:.4f}")
            save("ch10", record, started)


COMMANDS = {"ch04": ch04, "ch05": ch05, "ch06": ch06, "ch08": ch08, "ch08ft": ch08ft, "ch08nsp": ch08nsp,
            "ch09": ch09, "ch10": ch10}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter", choices=sorted(COMMANDS))
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. SEEDS - 1 (default 5)")
    parser.add_argument("--multiples", type=int, nargs="+", default=None,
                        help="budgets, as multiples of the chapter's steps")
    parser.add_argument("--lrs", type=float, nargs="+", default=None,
                        help="chapter 8: peak learning rates (default: the chapter's, a fifth of it, twice it)")
    parser.add_argument("--variants", nargs="+", default=None,
                        help="chapter 10: the study's variants to run (default: all)")
    parser.add_argument("--race-multiples", type=int, nargs="*", default=None,
                        help="chapter 10's race: budgets, as multiples of its steps (default 1 4; none: no race)")
    args = parser.parse_args(argv)
    tl.set_cpu_threads("cpu")  # one thread, as the chapters on a CPU
    torch.use_deterministic_algorithms(True)
    COMMANDS[args.chapter](args, argv)


if __name__ == "__main__":
    main()
