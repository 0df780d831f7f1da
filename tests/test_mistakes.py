"""Off the happy path: each mistake a learner makes gets an error that names the argument, the value
and what is allowed (and, where a nanoGPT or Hugging Face habit explains the slip, the library's way);
nothing is silently wrong. One case per class of mistake (issue 23); ``test_properties.py`` draws
many more with Hypothesis.
"""

import json
from pathlib import Path

import pytest
import torch

import transformer_lib as tl
from transformer_lib.viz import live_panel

SMALL = dict(vocab_size=11, n_ctx=8, d_model=16, n_layers=1, n_heads=2)


def gpt():
    torch.manual_seed(0)
    return tl.GPT2(tl.GPT2Config(**SMALL)).eval()


def diverged(model):
    """What a diverged run leaves: NaN weights."""
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    return model


def encoder_decoder():
    return tl.EncoderDecoder(tl.EncoderDecoderConfig(**SMALL, d_ff=32)).eval()


class MyCallback(tl.Callback):
    pass


IDS = torch.tensor([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]])
DATA = torch.arange(200) % 11
TRAIN = dict(max_steps=2, eval_interval=2, eval_steps=1, progress=False, device="cpu")


def padded_with(value):
    targets = IDS.clone()
    targets[:, -2:] = value
    return targets


# (call, exception, the message it must match): the message names the argument and what is allowed
MISTAKES = {
    # silent before: wrong numbers, or an argument ignored
    "integer input to LayerNorm": (lambda: tl.LayerNorm(4)(torch.tensor([[1, 2, 3, 4]])), TypeError,
                                   r"x must hold floating-point numbers \(torch.float32.*got dtype torch.int64: "
                                   r"convert with x.float\(\)"),
    "integer input to RMSNorm": (lambda: tl.RMSNorm(4)(torch.ones(1, 4, dtype=torch.long)), TypeError,
                                 r"x must hold floating-point numbers"),
    "float64 input to FeedForward": (lambda: tl.FeedForward(4)(torch.randn(1, 2, 4, dtype=torch.float64)),
                                     TypeError, r"x has dtype torch.float64 but the layer's weights are "
                                                r"torch.float32: convert the input with x.to\(torch.float32\)"),
    "float64 input to GatedFeedForward": (lambda: tl.GatedFeedForward(4)(torch.randn(1, 2, 4).double()),
                                          TypeError, r"x has dtype torch.float64"),
    "float64 input to attention": (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(1, 2, 8).double()),
                                   TypeError, r"x has dtype torch.float64 but the layer's weights"),
    "integer q, k, v": (lambda: tl.scaled_dot_product_attention(*[torch.ones(1, 2, 4, dtype=torch.long)] * 3),
                        TypeError, r"q must hold floating-point numbers, got dtype torch.int64"),
    "mixed q, k, v dtypes": (lambda: tl.scaled_dot_product_attention(torch.ones(1, 2, 4), torch.ones(1, 2, 4),
                                                                      torch.ones(1, 2, 4).double()),
                             TypeError, r"q, k, v must share one dtype"),
    "integer input to RoPE": (lambda: tl.RotaryEmbedding(4, 8)(torch.ones(1, 2, 4, dtype=torch.long)), TypeError,
                              r"x must be a floating-point torch.Tensor"),
    "every target -100": (lambda: gpt().loss(IDS, torch.full_like(IDS, -100)), ValueError,
                          r"every entry of targets is IGNORE_INDEX \(-100\): there is nothing to predict"),
    "masked_lm_loss of -100 labels": (lambda: tl.masked_lm_loss(torch.randn(3, 11), torch.full((3,), -100)),
                                      ValueError, r"every entry of labels is IGNORE_INDEX"),
    "greedy generate, NaN weights": (lambda: tl.generate(diverged(gpt()), IDS[:1, :2], 3, do_sample=False),
                                     ValueError, r"cannot generate: the model's weights are not finite \(NaN or "
                                                 r"inf in token_embedding.weight.*Training diverged"),
    "sampled generate, NaN weights": (lambda: tl.generate(diverged(gpt()), IDS[:1, :2], 3), ValueError,
                                      r"weights are not finite.*Training diverged"),
    "encoder-decoder generate, NaN weights": (lambda: diverged(encoder_decoder()).generate(IDS, 1, 3), ValueError,
                                              r"weights are not finite"),
    "NaN logits to sample_next_token": (lambda: tl.sample_next_token(torch.full((1, 11), float("nan"))),
                                        ValueError, r"logits are not finite"),
    "eos_token_id outside the vocabulary": (lambda: tl.generate(gpt(), IDS[:1, :2], 3, eos_token_id=50),
                                            ValueError, r"eos_token_id must be in \[0, 10\], got 50"),
    "pad_token_id outside the vocabulary": (lambda: tl.generate(gpt(), IDS[:1, :2], 3, eos_token_id=1,
                                                                pad_token_id=11),
                                            ValueError, r"pad_token_id must be in \[0, 10\], got 11"),
    "do_sample='False' (a truthy string)": (lambda: tl.generate(gpt(), IDS[:1, :2], 3, do_sample="False"),
                                            TypeError, r"do_sample must be True or False, got str 'False'"),
    "negative weight_decay": (lambda: tl.TrainConfig(weight_decay=-0.1), ValueError,
                              r"weight_decay must be a finite number in \[0.0, inf\], got -0.1"),
    "compile='no'": (lambda: tl.TrainConfig(compile="no"), TypeError, r"compile must be True or False, got str"),
    "progress=1": (lambda: tl.TrainConfig(progress=1), TypeError, r"progress must be True or False, got int 1"),
    "warm-up as long as the run": (lambda: tl.TrainConfig(max_steps=50, warmup_steps=100), ValueError,
                                   r"warmup_steps=100 must be less than max_steps=50: .*still be rising at the "
                                   r"last step \(it would end at 50% of lr\).*warmup_steps=5"),
    "empty text for a tokenizer": (lambda: tl.CharTokenizer.from_text(""), ValueError,
                                   r"the text is empty: a CharTokenizer needs at least one character"),
    "a BERTConfig for GPT2": (lambda: tl.GPT2(tl.BERTConfig(**SMALL)), TypeError,
                              r"config must be a GPT2Config, got BERTConfig: .*norm_position='post'"),
    "a GPT2Config for BERT": (lambda: tl.BERT(tl.GPT2Config(**SMALL)), TypeError,
                              r"config must be a BERTConfig, got GPT2Config"),
    "pad_token_id outside the collator's vocabulary": (lambda: tl.MLMCollator(11, 3, pad_token_id=11), ValueError,
                                                       r"pad_token_id must be in \[0, 10\], got 11"),
    "special id outside the vocabulary": (lambda: tl.MLMCollator(11, 3, special_ids=[12]), ValueError,
                                          r"each of special_ids must be in \[0, 10\], got 12"),
    "ids outside the collator's vocabulary": (lambda: tl.MLMCollator(11, 3)(IDS + 10), ValueError,
                                              r"input_ids contains token id 15, outside the vocabulary \[0, 10\]"),
    "float data to get_batch": (lambda: tl.get_batch(torch.rand(100), 2, 4), TypeError,
                                r"data must hold integer token ids, got dtype torch.float32"),
    "float ids to train_val_split": (lambda: tl.train_val_split(torch.rand(100)), TypeError,
                                     r"ids must hold integer token ids"),
    # unclear before: an internal error
    "a list to BatchSampler": (lambda: tl.BatchSampler([1, 2, 3] * 10, 4, 8), TypeError,
                               r"data must be a 1-D torch.Tensor of token ids, got list; make one with "
                               r"torch.tensor\(tok.encode\(text\)\)"),
    "a list to the collator": (lambda: tl.MLMCollator(11, 3)([[1, 2, 3]]), TypeError,
                               r"input_ids must be a torch.Tensor of token ids, got list; make one with "
                               r"torch.tensor\(\[ids\]\)"),
    "a list to a model": (lambda: gpt()([[1, 2, 3]]), TypeError, r"input_ids must be a torch.Tensor.*torch.tensor"),
    "a list to LayerNorm": (lambda: tl.LayerNorm(4)([[1.0, 2.0, 3.0, 4.0]]), TypeError,
                            r"x must be a torch.Tensor of torch.float32 vectors, got list; make one with "
                            r"torch.tensor\(x, dtype=torch.float32\)"),
    "a list as targets": (lambda: gpt().loss(IDS, IDS.tolist()), TypeError,
                          r"targets must be a torch.Tensor of token ids, got list"),
    "targets padded with -1 (nanoGPT)": (lambda: gpt().loss(IDS, padded_with(-1)), ValueError,
                                         r"targets contains -1: a target is a token id in \[0, 10\], or "
                                         r"IGNORE_INDEX \(-100.*nanoGPT pads targets with -1; here write "
                                         r"targets.masked_fill\(targets == -1, tl.IGNORE_INDEX\)"),
    "a target outside the vocabulary": (lambda: gpt().loss(IDS, padded_with(11)), ValueError,
                                        r"targets contains token id 11, outside the vocabulary \[0, 10\]"),
    "labels padded with -1 (BERT)": (lambda: tl.BERT(tl.BERTConfig(**SMALL)).mlm_loss(IDS, padded_with(-1)),
                                     ValueError, r"labels contains -1"),
    "token ids instead of a sampler (nanoGPT)": (lambda: tl.train(gpt(), DATA, DATA, tl.TrainConfig(**TRAIN)),
                                                 TypeError, r"train_batches must be a function that returns a "
                                                            r"batch, got one tensor of shape \(200,\).*nanoGPT.*"
                                                            r"tl.BatchSampler\(train_ids"),
    "the model's config instead of a TrainConfig": (lambda: tl.train(gpt(), tl.BatchSampler(DATA, 2, 4), None,
                                                                     gpt().config),
                                                    TypeError, r"config must be a tl.TrainConfig, got GPT2Config: "
                                                               r"that is the model's configuration"),
    "a batch function returning inputs only": (lambda: tl.train(gpt(), lambda: tl.get_batch(DATA, 2, 4)[0], None,
                                                                tl.TrainConfig(**TRAIN)),
                                               TypeError, r"the batch function returned one tensor of shape \(2, 4\), "
                                                          r"but the default loss_fn calls model.loss\(inputs, "
                                                          r"targets\)"),
    "one callback, not in a list": (lambda: tl.train(gpt(), tl.BatchSampler(DATA, 2, 4), None,
                                                     tl.TrainConfig(**TRAIN), callbacks=MyCallback()),
                                    TypeError, r"callbacks must be a list of callbacks, got a single MyCallback: "
                                               r"pass callbacks=\[MyCallback\(...\)\]"),
    "a callback class, not an instance": (lambda: tl.train(gpt(), tl.BatchSampler(DATA, 2, 4), None,
                                                           tl.TrainConfig(**TRAIN), callbacks=[MyCallback]),
                                          TypeError, r"callbacks\[0\] is the class MyCallback; pass an instance"),
    "a loss module as loss_fn": (lambda: tl.train(gpt(), tl.BatchSampler(DATA, 2, 4), None, tl.TrainConfig(**TRAIN),
                                                  loss_fn=torch.nn.CrossEntropyLoss()),
                                 TypeError, r"loss_fn is called as loss_fn\(model, batch\)"),
    "device='cuda' without a GPU": (lambda: tl.TrainConfig(device="cuda"), ValueError,
                                    r"device='cuda', but PyTorch sees no CUDA GPU here"),
    "device='gpu'": (lambda: tl.TrainConfig(device="gpu"), ValueError,
                     r"device must be 'cpu', 'cuda', 'cuda:N', 'mps' or None .*got 'gpu'"),
    "betas=0.9": (lambda: tl.TrainConfig(betas=0.9), TypeError,
                  r"betas must be a pair \(beta1, beta2\), got float 0.9: e.g. betas=\(0.9, 0.95\)"),
    "betas=(0.9, 1.5)": (lambda: tl.TrainConfig(betas=(0.9, 1.5)), ValueError, r"betas\[1\] must be in \[0, 1\)"),
    "max_steps=1e4": (lambda: tl.TrainConfig(max_steps=1e4), TypeError,
                      r"max_steps must be an int, got float 10000.0 \(int\(10000.0\) = 10000\)"),
    "encode a number": (lambda: tl.CharTokenizer.from_text("0123").encode(2024), TypeError,
                        r"text must be a str, got int: tok.encode\(str\(2024\)\)"),
    "decode a batch": (lambda: tl.CharTokenizer.from_text("abc").decode(torch.zeros(2, 3, dtype=torch.long)),
                       ValueError, r"ids must be one sequence \(1-D\), got shape \(2, 3\)"),
    "an attention mask on another device": (lambda: tl.MultiHeadAttention(8, 2)(
        torch.randn(1, 3, 8), mask=torch.ones(3, 3, dtype=torch.bool, device="meta")),
        ValueError, r"mask is on meta but the input is on cpu: move it with mask.to\('cpu'\)"),
    "an attention_mask on another device": (lambda: gpt()(IDS, attention_mask=torch.ones(2, 5, dtype=torch.long,
                                                                                        device="meta")),
                                            ValueError, r"attention_mask is on meta but input_ids is on cpu"),
    "1-D ids to the encoder-decoder": (lambda: encoder_decoder()(torch.tensor([1, 2, 3]), torch.tensor([1, 2])),
                                       ValueError, r"src_ids must have shape \(batch, seq\), got shape \(3,\): "
                                                   r"one sequence is a batch of one, src_ids\[None\]"),
    "1-D ids to beam_search": (lambda: tl.beam_search(lambda x: gpt()(x)[:, -1], torch.tensor([1, 2]), 3, 2,
                                                      vocab_size=11),
                               ValueError, r"input_ids must have shape \(batch, seq\), got shape \(2,\)"),
    "1-D ids to generate": (lambda: tl.generate(gpt(), torch.tensor([1, 2]), 3), ValueError,
                            r"input_ids must have shape \(batch, seq\), got shape \(2,\): one sequence is a "
                            r"batch of one, input_ids\[None\]"),
    "a Hugging Face setting name": (lambda: tl.GPT2Config(n_embd=16), TypeError,
                                    r"GPT2Config has no setting 'n_embd'; Hugging Face's and nanoGPT's names are "
                                    r"spelled differently here: n_embd -> d_model"),
    "nanoGPT's block_size": (lambda: tl.GPT2Config(block_size=64), TypeError, r"block_size -> n_ctx"),
    "set_cpu_threads('two')": (lambda: tl.set_cpu_threads("two"), ValueError,
                               r"device must be 'cpu', 'cuda', 'cuda:N', 'mps', a number of threads or None"),
    "set_cpu_threads(0)": (lambda: tl.set_cpu_threads(0), ValueError, r"threads must be in \[1, inf\], got 0"),
}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_mistake_gets_an_answer(name):
    call, error, message = MISTAKES[name]
    with pytest.raises(error, match=message):
        call()


# ---- what is accepted now does what a learner expects --------------------------------------------
def schedule(config):
    return [tl.lr_at(s, config.lr, config.min_lr, config.warmup_steps, config.max_steps)
            for s in range(config.max_steps)]


@pytest.mark.parametrize("max_steps", [1, 2, 10, 50, 150, 999, 1000, 5000])
def test_the_default_warmup_reaches_the_peak_and_decays(max_steps):
    """TrainConfig(max_steps=50) used to keep 100 warm-up steps: the rate peaked on the last step at half of lr."""
    config = tl.TrainConfig(max_steps=max_steps)
    assert config.warmup_steps == min(100, max_steps // 10)
    lrs = schedule(config)
    peak = max(range(max_steps), key=lambda s: lrs[s])
    assert lrs[peak] == pytest.approx(config.lr)
    assert all(a >= b for a, b in zip(lrs[peak:], lrs[peak + 1:]))  # then it only decays
    if max_steps >= 10:
        assert peak < max_steps - 1 and lrs[-1] < 0.5 * config.lr


def test_a_warmup_one_step_short_of_the_run_is_accepted():
    config = tl.TrainConfig(max_steps=20, warmup_steps=19)
    lrs = schedule(config)
    assert max(lrs) == pytest.approx(config.lr) and lrs[-1] == pytest.approx(config.lr)  # the peak at the end
    assert tl.TrainConfig(betas=[0.9, 0.99]).betas == (0.9, 0.99)


def test_generate_stops_rows_at_eos_when_sampling():
    """eos_token_id used to be ignored unless num_beams > 1."""
    model = gpt()
    free = tl.generate(model, IDS[:, :2], 6, do_sample=False)
    eos = int(free[0, 3])  # the token greedy decoding emits second for row 0
    out = tl.generate(model, IDS[:, :2], 6, do_sample=False, eos_token_id=eos, pad_token_id=0)
    first = [row.index(eos) for row in free[:, 2:].tolist() if eos in row]
    for row, full in zip(out[:, 2:].tolist(), free[:, 2:].tolist()):
        if eos in full:  # up to its eos the same tokens, then padding
            k = full.index(eos)
            assert row[:k + 1] == full[:k + 1] and set(row[k + 1:]) <= {0}
        else:
            assert row == full[:len(row)]
    if len(first) == out.shape[0]:  # every row ended: generation stopped early
        assert out.shape[1] == 2 + max(first) + 1


def test_set_cpu_threads_takes_a_thread_count():
    before = torch.get_num_threads()
    try:
        tl.set_cpu_threads(1)  # crashed on a CPU-only machine: 1 was read as the device cuda:1
        assert torch.get_num_threads() == 1
        tl.set_cpu_threads("cpu")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_mistakes_on_the_gpu_path_stay_device_side(monkeypatch):
    """In tl.train's hot path on a GPU the target check must not read back (a sync): a device-side assert."""
    from transformer_lib import _checks, losses

    called = []
    monkeypatch.setattr(torch, "_assert_async", lambda cond, msg="": called.append(msg))
    token = _checks._HOT_PATH.set(True)
    try:
        logits = torch.randn(1, 3, 11, device="meta")
        losses._check_labels("targets", torch.zeros(1, 3, dtype=torch.long, device="meta"), logits)
    finally:
        _checks._HOT_PATH.reset(token)
    assert called and "IGNORE_INDEX" in called[0]


# ---- files: each error names the file and says what it is ------------------------------------------
def damaged(folder: Path, kind: str) -> Path:
    tl.save_pretrained(gpt(), folder)
    weights, config = folder / "model.safetensors", folder / "config.json"
    if kind == "truncated":
        weights.write_bytes(weights.read_bytes()[:300])
    elif kind == "html":
        config.write_text("<!DOCTYPE html><html><body>Page not found</body></html>")
    elif kind == "hugging face":
        config.write_text(json.dumps({"model_type": "gpt2", "n_embd": 16, "architectures": ["GPT2LMHeadModel"]}))
    elif kind == "unknown key":
        meta = json.loads(config.read_text())
        meta["config"]["n_embd"] = 16
        config.write_text(json.dumps(meta))
    elif kind == "pickle":
        torch.save(gpt().state_dict(), weights)
    elif kind == "another model":
        meta = json.loads(config.read_text())
        meta["config"]["d_model"] = 32
        config.write_text(json.dumps(meta))
    elif kind == "invalid setting":
        meta = json.loads(config.read_text())
        meta["config"]["n_heads"] = 3
        config.write_text(json.dumps(meta))
    return folder


FILES = {
    "truncated": r"model.safetensors could not be read \(.*\): it is damaged or incomplete",
    "html": r"config.json is not JSON .*it starts with '<!DOCTYPE html>.*a web page \(HTML\) was saved",
    "hugging face": r"config.json is not a transformer_lib config.*It is a Hugging Face config \(model_type "
                    r"'gpt2'\): .*tl.gpt2_from_hf",
    "unknown key": r"config.json: GPT2Config has no setting 'n_embd'.*n_embd -> d_model",
    "pickle": r"model.safetensors is a PyTorch pickle \(torch.save\), not a safetensors file",
    "another model": r"model.safetensors does not hold the weights of the model that .*config.json describes "
                     r"\(size mismatch for .*, and \d+ more\)",
    "invalid setting": r"config.json holds an invalid GPT2Config: d_model \(16\) must be divisible by n_heads \(3\)",
}


@pytest.mark.parametrize("kind", list(FILES))
def test_load_pretrained_names_the_file_at_fault(tmp_path, kind):
    folder = damaged(tmp_path / "model", kind)
    with pytest.raises(ValueError, match=FILES[kind]) as error:
        tl.load_pretrained(folder)
    assert str(folder) in str(error.value)


def test_load_pretrained_folder_errors(tmp_path):
    tl.save_pretrained(gpt(), tmp_path)
    with pytest.raises(ValueError, match=r"directory must be the folder that holds config.json and "
                                         r"model.safetensors, got the file .*model.safetensors: pass its folder"):
        tl.load_pretrained(tmp_path / "model.safetensors")
    with pytest.raises(FileNotFoundError, match=r"gpt2/config.json is missing.*tl.GPT2.from_pretrained"):
        tl.load_pretrained("gpt2")
    with pytest.raises(ValueError, match=r"device='cuda', but PyTorch sees no CUDA GPU"):
        if not torch.cuda.is_available():
            tl.load_pretrained(tmp_path, device="cuda")
        else:
            raise ValueError("device='cuda', but PyTorch sees no CUDA GPU (skipped on a GPU machine)")


def test_the_data_folder_variable_names_a_folder(tmp_path, monkeypatch):
    text = tmp_path / "tinyshakespeare.txt"
    text.write_text("not the corpus")
    monkeypatch.setenv("TFS_DATA_DIR", str(text))
    with pytest.raises(ValueError, match=rf"TFS_DATA_DIR is {text}, a file: it must name the folder that holds "
                                         rf"tinyshakespeare.txt: use its folder, {tmp_path}"):
        tl.load_tiny_shakespeare(download=False)


# ---- export: a diverged model, and a learner's install without the ONNX packages -------------------
def test_export_refuses_a_diverged_model(tmp_path):
    with pytest.raises(ValueError, match=r"cannot export the model: the model's weights are not finite.*"
                                         r"Training diverged"):
        tl.export_for_browser(diverged(gpt()), list("abcdefghijk"), "nan", [[1, 2]], directory=tmp_path)
    assert not (tmp_path / "nan").exists()  # nothing written


def test_export_without_the_onnx_packages_saves_the_weights_and_says_so(tmp_path, monkeypatch):
    """Colab's set-up cell installs transformer_lib[book], which leaves out what only the site needs."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.startswith("onnx") else
                        real(name, *a))
    model = gpt()
    export = tl.export_for_browser(model, list("abcdefghijk"), "colab", [[1, 2]], directory=tmp_path)
    assert export.skipped.startswith("ONNX export skipped: onnx, onnxscript, onnxruntime not installed")
    assert export.onnx_bytes == 0 and export.max_abs_diff is None and export.safetensors_bytes > 0
    assert "ONNX export skipped" in repr(export)
    folder = tmp_path / "colab"
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]  # no browser.json
    loaded = tl.load_pretrained(folder)
    assert torch.equal(loaded(IDS), model(IDS))
    html = live_panel(export)._repr_html_()
    assert "ONNX export skipped" in html and "tl.load_pretrained" in html
    assert "ONNX export skipped" in repr(live_panel(export))

