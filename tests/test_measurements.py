"""transformer_lib.measurements: recording a chapter's results per hardware kind, and the table."""

import json

import transformer_lib.measurements as m


def test_record_writes_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(m.RECORD_ENV, raising=False)
    assert m.record("07_gpt2", 12.3, val_loss=1.9) is False
    target = tmp_path / "measured.json"
    monkeypatch.setenv(m.RECORD_ENV, str(target))
    assert m.record("07_gpt2", 12.34, val_loss=1.91234) is True
    m.record("09_transformer", 5.0, accuracy=1.0)
    data = json.loads(target.read_text())
    entry = data["07_gpt2"]["CPU"]  # no CUDA in the tests
    assert entry["seconds"] == 12.3 and entry["results"] == {"val_loss": 1.9123}
    assert "thread" in entry["device"] and set(data) == {"07_gpt2", "09_transformer"}


def test_table_has_a_row_per_kind_and_says_what_is_not_measured(tmp_path, monkeypatch):
    target = tmp_path / "measured.json"
    monkeypatch.setenv(m.RECORD_ENV, str(target))
    m.record("07_gpt2", 40.0, val_loss=1.95, train_loss=1.9)
    table = m.expected_table("07_gpt2", {"val_loss": "validation loss"}, path=target).splitlines()
    assert table[0] == "| hardware | measured on | validation loss | training time |"
    assert len(table) == 2 + len(m.KINDS)
    assert table[2].startswith("| CPU |") and "| 1.950 | 40 s |" in table[2]
    load = json.loads(target.read_text())["07_gpt2"]["CPU"]["load_average"]
    assert load is None or f", load {load:.1f})" in table[2]  # what stretched the training time
    assert all("not measured yet" in row for row in table[3:])
    assert "not measured yet" in m.expected_table("06_weight_tying", path=target).splitlines()[2]


def test_shipped_measurements_are_well_formed():
    for chapter, kinds in m.load().items():
        assert set(kinds) <= set(m.KINDS), chapter
        for entry in kinds.values():
            assert entry["seconds"] > 0 and entry["results"] and entry["device"]
