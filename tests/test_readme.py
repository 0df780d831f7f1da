"""The README's library example runs as written."""

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.slow
def test_readme_python_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert namespace["logits"].shape == (2, 17, 65)
    assert namespace["out"].shape == (2, 24)
    assert "torch.Size([2, 6, 17, 17])" in capsys.readouterr().out
    assert isinstance(namespace["loss"], torch.Tensor)
