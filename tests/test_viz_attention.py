"""viz.attention: every control of the explorer shows the right layer, with the right tokens on hover."""

import json

import numpy as np
import plotly.io as pio
import pytest
import torch

import transformer_lib as tl
from transformer_lib.viz.attention import (
    attention_explorer,
    display_token,
    heatmap_grid,
    matrix_steps,
    position_labels,
)

TOKENS = list("to be or")  # repeated tokens ("o", " ") must stay distinct on the axes


def apply(visible, args):
    """What plotly.js does with a method="update" step: restyle 'visible' (on the listed traces, or all)."""
    visible = list(visible)
    new = args[0]["visible"]
    indices = args[2] if len(args) > 2 else range(len(visible))
    for k, j in enumerate(indices):
        visible[j] = new[k] if isinstance(new, list) else new
    return visible


@pytest.fixture(scope="module")
def captured():
    """Real maps from tl.capture_attention: a 3-layer GPT-2 with 4 heads, batch of 2."""
    torch.manual_seed(0)
    model = tl.GPT2(tl.GPT2Config(vocab_size=50, n_ctx=16, d_model=32, n_layers=3, n_heads=4)).eval()
    with tl.capture_attention(model) as maps:
        model(torch.randint(0, 50, (2, len(TOKENS))))
    return maps


def test_traces_panels_and_initial_state(captured):
    fig = attention_explorer(captured, TOKENS, max_cols=2)
    assert len(fig.data) == 3 * 4  # one heatmap per (layer, head)
    assert [a.text for a in fig.layout.annotations] == [f"head {h}" for h in range(4)]
    assert [bool(t.visible) for t in fig.data] == [True] * 4 + [False] * 8
    assert fig.layout.title.text.endswith("blocks.0.attn")
    # panels: 2 x 2 grid, head h in its own axes
    assert len({(t.xaxis, t.yaxis) for t in fig.data}) == 4
    assert fig.data[1].xaxis == fig.data[5].xaxis  # the same head of two layers shares a panel


def test_every_dropdown_button_shows_exactly_that_layer(captured):
    fig = attention_explorer(captured, TOKENS)
    (menu,) = fig.layout.updatemenus
    assert [b.label for b in menu.buttons] == list(captured)
    start = [bool(t.visible) for t in fig.data]
    for li, (name, button) in enumerate(zip(captured, menu.buttons)):
        assert button.method == "update"
        visible = apply(start, button.args)
        shown = [t for t, v in zip(fig.data, visible) if v]
        assert len(shown) == 4 and all(t.name.startswith(f"{name}, head") for t in shown)
        for h, trace in enumerate(shown):  # batch element 0, each head's own weights
            np.testing.assert_allclose(np.asarray(trace.z), captured[name][0, h].numpy(), atol=1e-3)
        assert button.args[1]["title.text"].endswith(name)


def test_slider_control_selects_the_same_layers(captured):
    fig = attention_explorer(captured, TOKENS, control="slider", layer="blocks.1.attn")
    assert not fig.layout.updatemenus and fig.layout.sliders[0].active == 1
    assert [bool(t.visible) for t in fig.data] == [False] * 4 + [True] * 4 + [False] * 4
    for li, step in enumerate(fig.layout.sliders[0].steps):
        visible = apply([False] * 12, step.args)
        assert [j // 4 for j, v in enumerate(visible) if v] == [li] * 4


def test_hover_names_query_and_key_tokens(captured):
    fig = attention_explorer(captured, TOKENS)
    trace = fig.data[0]
    assert "query %{y}" in trace.hovertemplate and "key %{x}" in trace.hovertemplate and "%{z" in trace.hovertemplate
    assert list(trace.y) == list(trace.x) == position_labels(TOKENS)
    assert (trace.x[2], trace.x[5], trace.x[1], trace.x[6]) == ("2 ␣", "5 ␣", "1 o", "6 o")  # repeated tokens stay apart
    for i, tok in enumerate(TOKENS):
        assert display_token(tok) in trace.x[i] and str(i) in trace.x[i]
    assert list(fig.layout.xaxis.ticktext) == [display_token(t) for t in TOKENS]


def test_cross_attention_layers_have_their_own_key_tokens():
    torch.manual_seed(0)
    src, tgt = list("abcde"), list("xyz")
    maps = {"self": torch.rand(1, 2, 3, 3).softmax(-1), "cross": torch.rand(1, 2, 3, 5).softmax(-1)}
    fig = attention_explorer(maps, tgt, {"self": tgt, "cross": src})
    cross = fig.layout.updatemenus[0].buttons[1].args[1]
    assert list(cross["xaxis.categoryarray"]) == position_labels(src)
    assert list(cross["xaxis2.ticktext"]) == src and list(cross["yaxis2.ticktext"]) == tgt
    assert list(fig.data[2].x) == position_labels(src)
    with pytest.raises(ValueError, match="pass key_tokens for cross-attention"):
        attention_explorer({"cross": maps["cross"]}, tgt)


def test_list_and_single_tensor_inputs_and_errors():
    torch.manual_seed(0)
    w = torch.rand(2, 3, 4, 4).softmax(-1)
    fig = attention_explorer([w, w], list("abcd"), batch_index=1)
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["layer 0", "layer 1"]
    np.testing.assert_allclose(np.asarray(fig.data[0].z), w[1, 0].numpy(), atol=1e-3)
    single = attention_explorer(w[0, 0], list("abcd"))  # one head, one layer: no control needed
    assert len(single.data) == 1 and not single.layout.updatemenus and not single.layout.sliders
    with pytest.raises(ValueError, match="seq_q=4 rows but 3 query tokens"):
        attention_explorer([w], list("abc"))
    with pytest.raises(ValueError, match="batch_index=2 is out of range"):
        attention_explorer([w], list("abcd"), batch_index=2)
    with pytest.raises(ValueError, match="control must be"):
        attention_explorer([w], list("abcd"), control="buttons")
    with pytest.raises(ValueError, match="maps is empty"):
        attention_explorer({}, list("abcd"))


def test_explorer_json_is_compact_and_valid(captured):
    text = pio.to_json(attention_explorer(captured, TOKENS))
    json.loads(text)
    assert "bdata" not in text  # plain lists: readable by plotly.js of any version (Colab ships plotly 5)


def test_matrix_steps_one_stage_per_step():
    s = torch.tensor([[1.0, 2.0], [3.0, -1.0]])
    stages = {"scores": s, "masked": s.masked_fill(torch.tensor([[False, True], [False, False]]), float("-inf")),
              "weights": s.softmax(-1), "output": torch.ones(2, 3)}
    cols = {"scores": ["k0", "k1"], "masked": ["k0", "k1"], "weights": ["k0", "k1"], "output": ["v0", "v1", "v2"]}
    fig = matrix_steps(stages, ["q0", "q1"], cols, title="t", captions={"masked": "hidden keys get -inf"})
    assert len(fig.data) == 4 and [bool(t.visible) for t in fig.data] == [True, False, False, False]
    masked = fig.data[1]
    assert masked.z[0][1] is None and masked.text[0][1] == "−∞"
    assert fig.data[2].zmin == 0 and fig.data[2].zmax == 1  # weights on [0, 1]
    for i, step in enumerate(fig.layout.sliders[0].steps):
        assert apply([False] * 4, step.args) == [j == i for j in range(4)]
        assert list(step.args[1]["xaxis.categoryarray"]) == cols[list(stages)[i]]
    assert "hidden keys get -inf" in fig.layout.sliders[0].steps[1].args[1]["title.text"]
    with pytest.raises(ValueError, match="3 columns but 2 column labels"):
        matrix_steps({"output": torch.ones(2, 3)}, ["q0", "q1"], ["k0", "k1"])


def test_heatmap_grid_panels():
    m = tl.causal_mask(3)
    fig = heatmap_grid({"a": m, "b": m.float() / 2}, list("xyz"), list("xyz"), cols=2)
    assert len(fig.data) == 2 and [a.text for a in fig.layout.annotations] == ["a", "b"]
    assert fig.data[0].z[0] == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="but 2 row and 3 column labels"):
        heatmap_grid({"a": m}, list("xy"), list("xyz"))


def test_one_panel_explorer_picks_layer_and_head_together():
    """panels="one": a single large panel; each control step shows exactly one (layer, head) map."""
    maps = {"a": torch.rand(1, 2, 5, 5).softmax(-1), "b": torch.rand(1, 3, 5, 5).softmax(-1)}
    fig = attention_explorer(maps, list("hello"), panels="one", layer="b")
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["a, head 0", "a, head 1", "b, head 0", "b, head 1", "b, head 2"]
    assert fig.layout.updatemenus[0].active == 2 and fig.layout.title.text.endswith("b, head 0")
    for k, button in enumerate(buttons):
        assert button.args[0]["visible"] == [j == k for j in range(5)]
        assert fig.data[k].name == button.label and fig.data[k].hovertemplate.endswith(f"<extra>{button.label}</extra>")
        assert torch.allclose(torch.tensor(fig.data[k].z), maps[button.label[0]][0, int(button.label[-1])],
                              atol=1e-3)
    assert not fig.layout.annotations  # no "head 0" subplot title over a panel that shows any head
    with pytest.raises(ValueError, match="panels"):
        attention_explorer(maps, list("hello"), panels="grid")
