"""export: safetensors round trip, ONNX (run by onnxruntime) against PyTorch, the panel's folder."""

import json

import numpy as np
import onnxruntime
import pytest
import torch

import transformer_lib as tl
from transformer_lib.export import WithAttention, export_onnx
from transformer_lib.export import BrowserExport
from transformer_lib.viz import live_compare, live_panel

from .conftest import LLAMA_STYLE

SMALL = dict(vocab_size=11, n_ctx=12, d_model=16, n_layers=2, n_heads=2)


def models():
    torch.manual_seed(0)
    return {
        "gpt2": tl.GPT2(tl.GPT2Config(**SMALL)),
        "llama": tl.GPT2(tl.GPT2Config(**SMALL, **LLAMA_STYLE)),
        # chapter 10's race: both on the fused attention kernel (use_sdpa), which the export must see through
        "gpt2-sdpa": tl.GPT2(tl.GPT2Config(**SMALL, use_sdpa=True)),
        "llama-sdpa": tl.GPT2(tl.GPT2Config(**SMALL, **LLAMA_STYLE, use_sdpa=True)),
        "bert": tl.BERT(tl.BERTConfig(**SMALL)),
        "enc-dec": tl.EncoderDecoder(tl.EncoderDecoderConfig(**SMALL, d_ff=32)),
        "enc-dec-rope": tl.EncoderDecoder(tl.EncoderDecoderConfig(**SMALL, d_ff=32, positional="rope",
                                                                  tie_weights=False)),
    }


def randomise_norms(model):
    """Norm gains are 1 and biases 0 at initialisation: make them distinct, so a lost one shows."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("name", list(models()))
def test_safetensors_round_trip(name, tmp_path):
    model = randomise_norms(models()[name]).eval()
    tl.save_pretrained(model, tmp_path)
    loaded = tl.load_pretrained(tmp_path)
    assert type(loaded) is type(model) and loaded.config == model.config and not loaded.training
    state, loaded_state = model.state_dict(), loaded.state_dict()
    assert state.keys() == loaded_state.keys()
    for key in state:
        assert torch.equal(state[key], loaded_state[key]), key
    if model.config.tie_weights:  # the tie survives: one tensor, not two equal copies
        head = loaded.lm_head if hasattr(loaded, "lm_head") else loaded.mlm_head.decoder
        embedding = loaded.tgt_embed.token_embedding if hasattr(loaded, "tgt_embed") else loaded.token_embedding
        assert head.weight is embedding.weight


def test_load_pretrained_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        tl.load_pretrained(tmp_path)
    tl.save_pretrained(models()["gpt2"], tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model": "Llama", "config": {}}))
    with pytest.raises(ValueError, match="names model 'Llama'"):
        tl.load_pretrained(tmp_path)
    with pytest.raises(TypeError, match="GPT2, BERT, EncoderDecoder"):
        tl.save_pretrained(torch.nn.Linear(2, 2), tmp_path)


def run_both(model, path, *ids):
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        expected = WithAttention(model.eval())(*ids)
    got = session.run(None, {i.name: t.numpy() for i, t in zip(session.get_inputs(), ids)})
    return got, expected


@pytest.mark.slow
@pytest.mark.parametrize("name", list(models()))
def test_onnx_matches_pytorch_at_every_length(name, tmp_path):
    """One exported graph for all lengths 1..n_ctx: logits and every attention map equal PyTorch's."""
    model = randomise_norms(models()[name]).eval()
    path = export_onnx(model, tmp_path / "model.onnx")
    n_ctx, g = model.config.n_ctx, torch.Generator().manual_seed(1)
    two = isinstance(model, tl.EncoderDecoder)
    for length in (1, 2, 5, n_ctx):
        ids = [torch.randint(0, 11, (1, length), generator=g)]
        if two:
            ids.append(torch.randint(0, 11, (1, max(1, n_ctx - length)), generator=g))
        got, expected = run_both(model, path, *ids)
        assert len(got) == (4 if two else 2)
        for g_out, e_out in zip(got, expected):
            assert g_out.shape == tuple(e_out.shape)
            np.testing.assert_allclose(g_out, e_out.numpy(), atol=2e-5, rtol=0)
        attention = expected[1]  # (n_layers, n_heads, seq_q, seq_k): rows are distributions
        assert torch.allclose(attention.sum(-1), torch.ones(()), atol=1e-5)
        if not two and name != "bert" and length > 1:  # causal: nothing above the diagonal
            assert attention.triu(1).abs().max() == 0


@pytest.mark.slow
def test_export_copies_leave_the_model_alone(tmp_path):
    model = models()["gpt2"].train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export_onnx(model, tmp_path / "m.onnx")
    assert model.training and all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.slow
def test_export_for_browser_writes_the_panels_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(tl.export.EXPORT_DIR_VARIABLE, str(tmp_path))
    model = models()["bert"]
    tokens = [*"abcdefghij", "[MASK]"]
    export = tl.export_for_browser(model, tokens, "bert-test", [[0, 1, 10, 3]], special={"mask": 10})
    folder = tmp_path / "bert-test"
    assert export.directory == folder and export.kind == "masked-lm" and export.max_abs_diff < 1e-5
    info = json.loads((folder / "browser.json").read_text())
    assert info["tokens"] == tokens and info["special"] == {"mask": 10} and info["n_ctx"] == SMALL["n_ctx"]
    assert info["inputs"] == ["input_ids"] and info["outputs"] == ["logits", "attention"]
    assert info["files"]["model.onnx"] == (folder / "model.onnx").stat().st_size == export.onnx_bytes
    assert info["parameters"] == model.num_parameters()
    loaded = tl.load_pretrained(folder)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
    html = live_panel(export, prompt='a "b"\n')._repr_html_()
    assert 'class="tfs-live"' in html and 'data-model="bert-test"' in html and 'data-kind="masked-lm"' in html
    assert 'data-prompt="a &quot;b&quot;\n"' in html and f'data-onnx-bytes="{export.onnx_bytes}"' in html


def test_export_for_browser_errors(tmp_path):
    model = models()["gpt2"]
    with pytest.raises(ValueError, match="vocab_size=11"):
        tl.export_for_browser(model, list("abc"), "x", [[0]], directory=tmp_path)
    with pytest.raises(ValueError, match=r"example must be a list of 1 id sequence\(s\) \(input_ids\)"):
        tl.export_for_browser(model, list("abcdefghijk"), "x", [[0], [1]], directory=tmp_path)
    with pytest.raises(ValueError, match=r"special\['mask'\] must be in \[0, 10\], got 11"):
        tl.export_for_browser(model, list("abcdefghijk"), "x", [[0]], special={"mask": 11}, directory=tmp_path)
    with pytest.raises(ValueError, match="plain folder name"):
        tl.export_for_browser(model, list("abcdefghijk"), "../x", [[0]], directory=tmp_path)
    with pytest.raises(TypeError, match="export_for_browser returned"):
        live_panel("ch07-gpt")


@pytest.mark.slow
def test_export_for_browser_refuses_a_file_that_differs(tmp_path, monkeypatch):
    """A wrong ONNX file is never published: no browser.json, and an error that says why."""
    import transformer_lib.export as export

    monkeypatch.setattr(export, "check_onnx", lambda *args: 0.5)
    with pytest.raises(RuntimeError, match="differ from PyTorch's by 5.00e-01"):
        tl.export_for_browser(models()["gpt2"], list("abcdefghijk"), "x", [[0, 1]], directory=tmp_path)
    assert not (tmp_path / "x" / "browser.json").exists()


def test_live_compare_names_every_model_with_its_loss(tmp_path):
    """The comparison's div: every model's folder, label and validation loss; bad arguments named."""
    def export(name, kind="causal-lm"):
        return BrowserExport(name, tmp_path / name, kind, 1000, 900, 123, 1e-6, 0.1)

    exports = {"GPT-2": export("ch10-gpt2"), "LLaMA-style": export("ch10-llama")}
    html = live_compare(exports, {"GPT-2": 1.61234, "LLaMA-style": 1.5}, prompt="ROMEO:\n")._repr_html_()
    assert 'class="tfs-live tfs-live-compare"' in html and 'data-models="ch10-gpt2 ch10-llama"' in html
    assert 'data-labels="[&quot;GPT-2&quot;, &quot;LLaMA-style&quot;]"' in html
    assert 'data-val-losses="[1.6123, 1.5]"' in html and 'data-prompt="ROMEO:\n"' in html
    assert 'data-model=' not in html  # a single panel's attribute: live-model.js would open it as one
    assert "validation loss 1.612" in repr(live_compare(exports, {"GPT-2": 1.61234, "LLaMA-style": 1.5}))
    with pytest.raises(ValueError, match="exports must be a dict of 2 to 4 models"):
        live_compare({"GPT-2": exports["GPT-2"]}, {"GPT-2": 1.0})
    with pytest.raises(TypeError, match=r"exports\['GPT-2'\] must be what export_for_browser returned"):
        live_compare({"GPT-2": "ch10-gpt2", "LLaMA-style": exports["LLaMA-style"]}, {"GPT-2": 1, "LLaMA-style": 1})
    with pytest.raises(ValueError, match=r"exports\['BERT'\] is a masked-lm model"):
        live_compare({"GPT-2": exports["GPT-2"], "BERT": export("b", "masked-lm")}, {"GPT-2": 1, "BERT": 1})
    with pytest.raises(ValueError, match="exports must be different models"):
        live_compare({"a": export("x"), "b": export("x")}, {"a": 1, "b": 1})
    with pytest.raises(ValueError, match=r"val_loss must give a validation loss for each of \['GPT-2', 'LLaMA-style'\]"):
        live_compare(exports, {"GPT-2": 1.0})
    with pytest.raises(ValueError, match=r"val_loss\['GPT-2'\] must be a finite loss >= 0 \(nats\), got nan"):
        live_compare(exports, {"GPT-2": float("nan"), "LLaMA-style": 1.0})
    with pytest.raises(TypeError, match="prompt must be a str, got int"):
        live_compare(exports, {"GPT-2": 1.0, "LLaMA-style": 1.0}, prompt=3)


# ---- chapter 8's speaker classifier: BERTForSequenceClassification, the panel's "classifier" kind ------------
CLS, SEP = 11, 12  # after the 10 characters and [MASK] of the classifier's vocabulary
CLF_TOKENS = [*"abcdefghij", "[MASK]", "[CLS]", "[SEP]"]


def classifier(n_classes: int = 3):
    """A small classifier with distinct norms and a non-trivial pooler, in eval mode."""
    torch.manual_seed(0)
    bert = randomise_norms(tl.BERT(tl.BERTConfig(**(SMALL | {"vocab_size": 13}))))
    model = tl.BERTForSequenceClassification(bert, n_classes, dropout=0.1)
    with torch.no_grad():  # a larger pooler and head than init_std's, so that every part moves the logits
        model.pooler.dense.weight.normal_(0, 0.5)
        model.classifier.weight.normal_(0, 0.5)
        model.classifier.bias.normal_(0, 0.5)
    return model.eval()


def test_classifier_round_trip(tmp_path):
    """save_pretrained / load_pretrained keep the head (n_classes, dropout) and every weight, the tie too."""
    model = classifier()
    tl.save_pretrained(model, tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    assert meta["model"] == "BERTForSequenceClassification" and meta["n_classes"] == 3 and meta["dropout"] == 0.1
    loaded = tl.load_pretrained(tmp_path)
    assert type(loaded) is type(model) and loaded.n_classes == 3 and loaded.drop.p == 0.1 and not loaded.training
    assert loaded.bert.config == model.bert.config
    state, loaded_state = model.state_dict(), loaded.state_dict()
    assert state.keys() == loaded_state.keys() and all(torch.equal(state[k], loaded_state[k]) for k in state)
    assert loaded.bert.mlm_head.decoder.weight is loaded.bert.token_embedding.weight
    meta["n_classes"] = 1
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r'"n_classes" must be an integer >= 2 .* got 1'):
        tl.load_pretrained(tmp_path)


@pytest.mark.slow
def test_classifier_export_is_the_classifier(tmp_path):
    """The ONNX file's logits are the classifier's (1, n_classes), at every length: the pooled [CLS] vector
    through the head, neither the MLM head nor the [CLS] vector without the pooler; its folder names the
    classes and the [CLS]/[SEP] ids, and the panel's div names the classes before it is opened."""
    model = classifier()
    export = tl.export_for_browser(model, CLF_TOKENS, "clf", [[CLS, 1, 2, 3, SEP]], directory=tmp_path,
                                   special={"mask": 10, "cls": CLS, "sep": SEP}, labels=["ROMEO", "JULIET", "NURSE"])
    assert export.kind == "classifier" and export.labels == ("ROMEO", "JULIET", "NURSE") and export.max_abs_diff < 1e-5
    info = json.loads((tmp_path / "clf" / "browser.json").read_text())
    assert info["labels"] == ["ROMEO", "JULIET", "NURSE"] and info["special"] == {"mask": 10, "cls": CLS, "sep": SEP}
    assert info["kind"] == "classifier" and info["model"] == "BERTForSequenceClassification"
    assert info["n_ctx"] == SMALL["n_ctx"] and info["vocab_size"] == 13 and info["tokens"] == CLF_TOKENS
    session = onnxruntime.InferenceSession(str(tmp_path / "clf" / "model.onnx"), providers=["CPUExecutionProvider"])
    g = torch.Generator().manual_seed(2)
    for length in (0, 1, 4, SMALL["n_ctx"] - 2):  # [CLS] line [SEP]: an empty line up to a full window
        ids = torch.cat([torch.tensor([CLS]), torch.randint(0, 10, (length,), generator=g), torch.tensor([SEP])])[None]
        logits, attention = session.run(None, {"input_ids": ids.numpy()})
        with torch.no_grad():
            h = model.bert.encode(ids)  # (1, seq, d_model)
            expected = model.classifier(model.pooler(h))  # (1, n_classes)
            no_pooler = model.classifier(h[:, 0])
        assert logits.shape == (1, 3) and attention.shape == (2, 2, length + 2, length + 2)
        np.testing.assert_allclose(logits, model(ids).detach().numpy(), atol=2e-5, rtol=0)
        np.testing.assert_allclose(logits, expected.numpy(), atol=2e-5, rtol=0)
        assert np.abs(logits - no_pooler.numpy()).max() > 1e-2, "the pooler would not be missed: a weak test"
    # the same line padded in a batch (as the chapter classifies) gives the panel's unpadded logits
    line = torch.tensor([[CLS, 1, 2, 3, SEP, 0, 0, 0]])
    with torch.no_grad():
        padded = model(line, attention_mask=(torch.arange(8) < 5).long()[None])
    np.testing.assert_allclose(session.run(None, {"input_ids": line[:, :5].numpy()})[0], padded.numpy(), atol=2e-5)
    html = live_panel(export, prompt="abc")._repr_html_()
    assert 'data-kind="classifier"' in html and 'data-classes="[&quot;ROMEO&quot;, &quot;JULIET&quot;, ' in html


def test_classifier_export_errors(tmp_path):
    model = classifier(2)
    args = (model, CLF_TOKENS, "clf", [[CLS, 1, SEP]])
    with pytest.raises(ValueError, match=r"labels must be the n_classes=2 class names .* got 3 of them"):
        tl.export_for_browser(*args, special={"cls": CLS, "sep": SEP}, labels=["a", "b", "c"], directory=tmp_path)
    with pytest.raises(ValueError, match=r"labels must be the n_classes=2 class names .* got NoneType"):
        tl.export_for_browser(*args, special={"cls": CLS, "sep": SEP}, directory=tmp_path)
    with pytest.raises(ValueError, match=r"labels must be .* got 2 of them: \['a', ' '\]"):
        tl.export_for_browser(*args, special={"cls": CLS, "sep": SEP}, labels=["a", " "], directory=tmp_path)
    with pytest.raises(ValueError, match=r"special must give the sep id"):
        tl.export_for_browser(*args, special={"cls": CLS}, labels=["a", "b"], directory=tmp_path)
    with pytest.raises(ValueError, match=r"special must give the cls and sep ids"):
        tl.export_for_browser(*args, labels=["a", "b"], directory=tmp_path)
    with pytest.raises(ValueError, match="labels are a classifier.s class names; a GPT2 has no classes"):
        tl.export_for_browser(models()["gpt2"], list("abcdefghijk"), "x", [[0]], labels=["a", "b"],
                              directory=tmp_path)
    with pytest.raises(ValueError, match="special's roles are mask, bos, eos, pad, cls, sep, got 'unk'"):
        tl.export_for_browser(*args, special={"unk": 1}, labels=["a", "b"], directory=tmp_path)
    assert not (tmp_path / "clf").exists()
