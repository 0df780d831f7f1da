"""data.bpe: training against a plain reference, encoding against tiktoken's GPT-2, and bad input."""

import os
from collections import Counter
from pathlib import Path

import pytest
import regex
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib.data.bpe import GPT2_SPLIT, merge_pair

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_text = pytest.mark.skipif(not (SHARED / "tinyshakespeare.txt").exists(), reason="../shared/data not present")
needs_tiktoken = pytest.mark.skipif(not os.environ.get("TIKTOKEN_CACHE_DIR"),
                                    reason="TIKTOKEN_CACHE_DIR not set (no offline copy of GPT-2's vocabulary)")


def reference_merges(text: str, n_merges: int) -> list[tuple[int, int]]:
    """BPE written plainly: every chunk kept as often as it occurs, all pairs recounted each merge."""
    chunks = [list(c.encode()) for c in regex.findall(GPT2_SPLIT, text)]
    merges = []
    for new_id in range(256, 256 + n_merges):
        counts = Counter(p for ids in chunks for p in zip(ids, ids[1:]))
        top = max(counts.values())
        pair = sorted(p for p, c in counts.items() if c == top)[0]  # the tie rule: smallest ids
        merges.append(pair)
        for ids in chunks:  # replace left to right, in place
            i = 0
            while i < len(ids) - 1:
                if (ids[i], ids[i + 1]) == pair:
                    ids[i:i + 2] = [new_id]
                i += 1
    return merges


TEXTS = ["aaabdaaabac", "the cat sat on the mat, the end", "low lower lowest newer wider " * 3,
         "ääää ß 🚀🚀 2024 2025 don't we'll   spaces\n\nlines"]


@pytest.mark.parametrize("text", TEXTS)
def test_training_matches_the_plain_reference(text):
    n = 5
    assert tl.train_bpe(text, n).merges == reference_merges(text, n)


@needs_text
def test_training_on_shakespeare_matches_the_plain_reference():
    text = tl.load_tiny_shakespeare(SHARED, download=False)[:20_000]
    assert tl.train_bpe(text, 60).merges == reference_merges(text, 60)


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet="ab c\n'1é", max_size=60), st.integers(0, 6))
def test_training_matches_the_reference_on_drawn_texts(text, n):
    if not text:
        with pytest.raises(ValueError, match="text is empty"):
            tl.train_bpe(text, n)
        return
    try:
        expected = reference_merges(text, n)
    except ValueError:  # max() of no pairs: fewer pairs than merges asked for
        with pytest.raises(ValueError, match="n_merges"):
            tl.train_bpe(text, n)
        return
    assert tl.train_bpe(text, n).merges == expected


def test_encoding_the_training_text_gives_its_trained_segmentation():
    """Applying every merge in the order it was learned, to each chunk, is what encode must return."""
    text = TEXTS[2]
    tok = tl.train_bpe(text, 10)
    expected = []
    for chunk in regex.findall(GPT2_SPLIT, text):
        ids = list(chunk.encode())
        for k, pair in enumerate(tok.merges):
            ids = merge_pair(ids, pair, 256 + k)
        expected += ids
    assert tok.encode(text) == expected
    assert len(expected) < len(text.encode())  # merges happened


def test_vocabulary_joins_the_bytes_of_each_pair():
    tok = tl.train_bpe(TEXTS[1], 6)
    assert tok.vocab_size == 262 and len(tok.vocab) == 262
    for k, (a, b) in enumerate(tok.merges):
        assert tok.vocab[256 + k] == tok.vocab[a] + tok.vocab[b]
    assert tok.vocab[256] == b"at"  # " cat", " sat", " mat": 'a','t' occurs 3 times, (97, 116)
    assert tok.decode_single_token_bytes(256) == b"at"


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=80))
def test_decode_inverts_encode_for_any_text(text):
    """Byte-level: every string has an encoding, characters never seen in training included."""
    tok = tl.train_bpe("hello world, hello there", 5)
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode(torch.tensor(ids, dtype=torch.long)) == text


def test_a_piece_of_a_character_decodes_to_the_replacement_character():
    tok = tl.train_bpe("abc", 1)
    ids = tok.encode("é")  # two bytes, two tokens
    assert len(ids) == 2 and tok.decode(ids[:1]) == "\ufffd"


@needs_tiktoken
@needs_text
def test_gpt2_merges_reproduce_tiktoken_on_tiny_shakespeare():
    """Our encode with GPT-2's merges read from tiktoken: the same tokens, byte for byte."""
    enc = tl.gpt2_tokenizer()
    gpt2 = tl.BPETokenizer.from_tiktoken(enc)
    assert gpt2.vocab_size == enc.n_vocab - 1  # all but <|endoftext|>
    assert gpt2.pattern == enc._pat_str == GPT2_SPLIT
    text = tl.load_tiny_shakespeare(SHARED, download=False)
    ours, theirs = gpt2.encode(text), enc.encode(text)
    assert [gpt2.vocab[i] for i in ours] == [enc.decode_single_token_bytes(i) for i in theirs]
    assert len(ours) == len(theirs) > 300_000
    _check_drawn_texts(gpt2, enc)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def _check_drawn_texts(gpt2, enc, text):
    ours, theirs = gpt2.encode(text), enc.encode(text, disallowed_special=())
    assert [gpt2.vocab[i] for i in ours] == [enc.decode_single_token_bytes(i) for i in theirs], text


# ---------------------------------------------------------------- bad input, named


def test_asking_for_more_merges_than_pairs_is_refused_with_the_count():
    with pytest.raises(ValueError, match=r"n_merges=50, but after 2 merges .* use n_merges <= 2"):
        tl.train_bpe("abc", 50)


@pytest.mark.parametrize("text, error, match", [
    ("", ValueError, "text is empty"),
    (["to be", "or not"], TypeError, r"text must be a str, got list"),
    (b"bytes", TypeError, r"text must be a str, got bytes"),
])
def test_training_text_must_be_a_nonempty_str(text, error, match):
    with pytest.raises(error, match=match):
        tl.train_bpe(text, 3)


@pytest.mark.parametrize("n", [-1, 2.5, "10", True])
def test_n_merges_must_be_a_nonnegative_int(n):
    with pytest.raises((TypeError, ValueError), match="n_merges"):
        tl.train_bpe("abcabc", n)


@pytest.mark.parametrize("merges, match", [
    ([(97, 98), (300, 1)], r"merges\[1\] must be a pair of ids in \[0, 256\]"),
    ([(97, 98, 99)], r"merges\[0\] must be a pair"),
    ([(97, 98), (97, 98)], r"merges\[1\] = \(97, 98\) repeats merges\[0\]"),
    ([(-1, 98)], r"merges\[0\]"),
    ("ab", "merges must be a list of"),
])
def test_bad_merges_are_refused(merges, match):
    with pytest.raises((TypeError, ValueError), match=match):
        tl.BPETokenizer(merges)


@pytest.mark.parametrize("ids", [[256], [-1], [1.0], [True]])
def test_decode_refuses_ids_outside_the_vocabulary(ids):
    tok = tl.BPETokenizer([])
    with pytest.raises(ValueError, match=r"token ids must be ints in \[0, 255\]"):
        tok.decode(ids)


def test_decode_of_a_batch_names_the_fix():
    tok = tl.BPETokenizer([])
    with pytest.raises(ValueError, match=r"decode each row"):
        tok.decode(torch.zeros(2, 3, dtype=torch.long))


def test_encode_of_a_list_names_the_fix():
    with pytest.raises(TypeError, match=r"encode one string at a time"):
        tl.BPETokenizer([]).encode(["a", "b"])


def test_from_tiktoken_refuses_what_is_not_a_byte_level_bpe():
    class Fake:
        name = "fake"
        _mergeable_ranks = {b"ab": 0, **{bytes([b]): b + 1 for b in range(256)}}
        _pat_str = GPT2_SPLIT

    with pytest.raises(ValueError, match="'fake' is not a byte-level BPE"):
        tl.BPETokenizer.from_tiktoken(Fake())


# ---------------------------------------------------------------- the chapter's figure


def test_merges_explorer_steps_show_their_own_segmentation_and_marker():
    from transformer_lib.viz.tokens import merges_explorer, token_pieces

    text = "the cat sat on the mat, the end"
    bpe = tl.train_bpe(text, 6)
    steps = [0, 3, 6]
    cut = {m: tl.BPETokenizer(bpe.merges[:m]) for m in steps}
    fig = merges_explorer({m: [token_pieces(t, text)] for m, t in cut.items()},
                          {m: len(t.encode(text)) / len(text) for m, t in cut.items()},
                          {"characters": (20, 1.0)})
    assert len(fig.data) == 3 + 1 + 3 + 1  # bars per step, the curve, a marker per step, a reference
    slider = fig.layout.sliders[0]
    assert slider.active == 2 and [s.label for s in slider.steps] == ["0", "3", "6"]
    for k, step in enumerate(slider.steps):
        visible = step.args[0]["visible"]
        assert [i for i, v in enumerate(visible) if v] == [k, 3, 4 + k, 7]
        n_tokens = len(cut[steps[k]].encode(text))
        assert f"{n_tokens} tokens" in step.args[1]["title.text"]
        assert len(fig.data[k].x) == n_tokens and sum(fig.data[k].x) == len(text)
    assert fig.layout.xaxis2.type == "log"
    with pytest.raises(ValueError, match="same, non-empty"):
        merges_explorer({0: [[("a", 97)]]}, {1: 1.0}, {})
    with pytest.raises(ValueError, match="active=5"):
        merges_explorer({0: [[("a", 97)]]}, {0: 1.0}, {}, active=5)
