"""data.sentence_tasks: NSP pairs and the speaker-classification task, on a hand-made play."""

import pytest
import torch

from transformer_lib.data import sentence_tasks as st

PLAY = """ANNE:
I am the first line of Anne.
And this is Anne's second.

BOB:
Bob speaks once.

ANNE:
Anne again, a third.

CARL:
Carl, one line.
Another of Carl's.
A third of Carl's.

BOB:
Bob's second speech.
"""


def test_speeches_split_speaker_from_lines():
    got = st.speeches(PLAY)
    assert got[0] == ("ANNE", ["I am the first line of Anne.", "And this is Anne's second."])
    assert [s for s, _ in got] == ["ANNE", "BOB", "ANNE", "CARL", "BOB"]


def test_speaker_lines_labels_split_and_no_name_leaks():
    data = st.speaker_lines(PLAY, n_speakers=2, test_every=2)
    assert data["speakers"] == ["ANNE", "CARL"]  # 3 lines each; Bob has 2
    anne, carl = 0, 1
    # every 2nd speech of a speaker is held out: Anne's second speech; Carl has one speech
    assert data["train"] == [("I am the first line of Anne.", anne), ("And this is Anne's second.", anne),
                             ("Carl, one line.", carl), ("Another of Carl's.", carl), ("A third of Carl's.", carl)]
    assert data["test"] == [("Anne again, a third.", anne)]
    lines = [line for line, _ in data["train"] + data["test"]]
    assert not any(line.endswith(":") or line in ("ANNE", "CARL", "BOB") for line in lines)
    assert not {line for line, _ in data["train"]} & {line for line, _ in data["test"]}


def test_speaker_lines_split_is_disjoint_even_for_repeated_lines():
    text = "\n\n".join(f"{name}:\nline {k} of {name}\nmore {k} of {name}\nMy lord!" for k in range(20)
                       for name in ("A", "B", "C"))
    data = st.speaker_lines(text, n_speakers=3)
    # 'My lord!' is in every speech: in training, so never a test line
    assert len(data["test"]) == 3 * 4 * 2 and len(data["train"]) == 3 * 16 * 3
    assert not {line for line, _ in data["train"]} & {line for line, _ in data["test"]}
    assert st.majority_share(data["test"]) == pytest.approx(1 / 3)


def test_nsp_pairs_half_true_next_line():
    pairs = st.nsp_pairs(PLAY, 40, seed=0)
    consecutive = {("I am the first line of Anne.", "And this is Anne's second."),
                   ("Carl, one line.", "Another of Carl's."), ("Another of Carl's.", "A third of Carl's.")}
    assert sum(label == 0 for _, _, label in pairs) == 20
    for a, b, label in pairs:
        assert ((a, b) in consecutive) == (label == 0)
    assert pairs == st.nsp_pairs(PLAY, 40, seed=0) and pairs != st.nsp_pairs(PLAY, 40, seed=1)


def test_encode_pairs_segments_and_padding():
    enc = st.encode_pairs([("abcdef", "xyz"), ("ab", "x")], lambda s: [ord(c) for c in s], cls_id=1, sep_id=2,
                          seq_len=11)
    # room: A keeps its last 4, B its first 4
    assert enc["input_ids"][0].tolist() == [1, *map(ord, "cdef"), 2, *map(ord, "xyz"), 2, 0]
    assert enc["token_type_ids"][0].tolist() == [0] * 6 + [1] * 4 + [0]
    assert enc["attention_mask"][0].tolist() == [1] * 10 + [0]
    assert enc["input_ids"][1].tolist() == [1, ord("a"), ord("b"), 2, ord("x"), 2] + [0] * 5
    assert enc["token_type_ids"][1].tolist() == [0, 0, 0, 0, 1, 1] + [0] * 5
    single = st.encode_lines(["hello world"], lambda s: [ord(c) for c in s], cls_id=1, sep_id=2, seq_len=6)
    assert single["input_ids"].tolist() == [[1, *map(ord, "hell"), 2]]
    assert single["token_type_ids"].sum() == 0


def test_balanced_and_errors():
    data = [("a", 0)] * 5 + [("b", 1)] * 3
    out = st.balanced(data, 3, seed=0)
    assert sorted(c for _, c in out) == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="per_class must be at most 3"):
        st.balanced(data, 4)
    with pytest.raises(ValueError, match="n_speakers must be at most the 3 speakers"):
        st.speaker_lines(PLAY, n_speakers=4)
    with pytest.raises(ValueError, match=r"n_pairs must be in \[1, inf\], got 0"):
        st.nsp_pairs(PLAY, 0)
    with pytest.raises(ValueError, match="no speech with two lines"):
        st.nsp_pairs("A:\none line\n", 2)
