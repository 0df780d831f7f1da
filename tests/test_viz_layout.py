"""viz.layout.tidy: one header layout for every figure (title, menus, legend, subplot titles)."""

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from transformer_lib.viz import BookRenderer
from transformer_lib.viz.layout import LEGEND_LINE, LINE, MENU_ROW, TITLE_CHARS, legend_rows, tidy, wrap


def test_wrap_breaks_at_spaces_and_keeps_tags_whole():
    text = "word " * 40 + "<span style='color: red'>a red note</span>"
    lines = wrap(text).split("<br>")
    assert len(lines) > 1 and all(len(line) <= TITLE_CHARS for line in lines[:-1])
    assert wrap(text).replace("<br>", " ") == text.strip()
    assert "<span style='color: red'>" in wrap(text)  # the tag's space did not become a break
    assert wrap("short<br>title") == "short<br>title"


def test_a_bare_title_string_in_a_control_becomes_title_text():
    """plotly.js 3+ drops ``{"title": "..."}`` in a button's args, and the figure loses its title."""
    fig = go.Figure(go.Bar(y=[1, 2]))
    fig.update_layout(title="a", updatemenus=[dict(buttons=[
        dict(label="b", method="relayout", args=[{"title": "b"}]),
        dict(label="c", method="update", args=[{}, {"title": {"text": "c", "x": 0.5}}])])])
    buttons = tidy(fig.to_dict())["layout"]["updatemenus"][0]["buttons"]
    assert buttons[0]["args"][0] == {"title.text": "b"}
    assert buttons[1]["args"][1] == {"title.text": "c", "title.x": 0.5}


def test_title_menus_and_legend_get_rows_of_their_own():
    fig = go.Figure([go.Scatter(y=[1, 2], name="one"), go.Scatter(y=[2, 1], name="two")])
    fig.update_layout(
        height=400, title=dict(text="x " * 50, x=0.5),  # two lines once wrapped
        legend=dict(orientation="h", y=1.02, yanchor="bottom"),
        updatemenus=[dict(buttons=[dict(label="a", method="relayout", args=[{"title.text": "t"}])],
                          y=1.1, yanchor="bottom")])
    layout = tidy(fig.to_dict())["layout"]
    assert layout["title"]["text"].count("<br>") == 1 and layout["title"]["xanchor"] == "left"
    top = layout["margin"]["t"]
    assert top >= 2 * LINE + MENU_ROW  # title lines, the menu row and the legend row
    plot = 400 - top - 80
    menu_top = (layout["updatemenus"][0]["y"] - 1) * plot  # px above the plot area
    legend_top = (layout["legend"]["y"] - 1) * plot
    title_bottom = top - (8 + 2 * LINE)  # px above the plot area where the title ends
    assert menu_top <= title_bottom and legend_top <= menu_top - MENU_ROW


def test_a_legend_too_wide_for_a_phone_gets_a_second_row_above_the_plot():
    """At MIN_WIDTH (a phone scrolls a 600-px figure) plotly.js wraps a wide horizontal legend; its second
    row covered the top of chapter 12's memory calculator (the 80 GB line) until tidy made room for it."""
    names = ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP", "ZeRO-3 + checkpointing"]  # 539 px in Chromium

    def figure(names, **menus):
        fig = go.Figure([go.Scatter(y=[1, 2], name=n) for n in names])
        fig.update_layout(height=460, title="t", legend=dict(orientation="h", y=1.02, yanchor="bottom"),
                          margin=dict(r=20), **menus)
        return tidy(fig.to_dict())["layout"]

    assert legend_rows(go.Figure([go.Scatter(y=[1], name=n) for n in names]).to_dict()) == 2
    assert legend_rows(go.Figure([go.Scatter(y=[1], name=n) for n in names[:4]]).to_dict()) == 1
    wide, narrow = figure(names), figure(names[:4])
    assert wide["margin"]["t"] == narrow["margin"]["t"] + LEGEND_LINE
    for layout in (wide, narrow):  # the legend's top stays just under the title's row
        plot = 460 - layout["margin"]["t"] - 80
        assert abs((layout["legend"]["y"] - 1) * plot - (layout["margin"]["t"] - (8 + LINE + 8))) < 1e-9
    # the same names again (one set per dropdown choice) are one legend, not two
    hidden = go.Figure([go.Scatter(y=[1], name=n, visible=False) for n in names[:4] * 3]).to_dict()
    assert legend_rows(hidden) == 1


def test_subplot_titles_get_room_and_unchanged_figures_stay_unchanged():
    fig = make_subplots(rows=1, cols=2, subplot_titles=["left", "right"])
    fig.update_layout(title="both", height=300)
    assert tidy(fig.to_dict())["layout"]["margin"]["t"] >= 8 + LINE + 8 + 22
    plain = go.Figure(go.Bar(y=[1])).update_layout(margin=dict(t=5)).to_dict()
    assert tidy(plain)["layout"]["margin"] == {"t": 5}


def test_the_book_renderer_tidies_and_hides_the_toolbar():
    fig = go.Figure(go.Bar(y=[1])).update_layout(title="t", updatemenus=[dict(
        buttons=[dict(label="a", method="relayout", args=[{"title": "new"}])])])
    bundle = BookRenderer().to_mimebundle(fig.to_dict())
    assert '"displayModeBar": false' in bundle["text/html"]
    assert bundle["application/vnd.plotly.v1+json"]["layout"]["updatemenus"][0]["buttons"][0]["args"] == [
        {"title.text": "new"}]
    assert fig.layout.updatemenus[0].buttons[0].args == ({"title": "new"},)  # the figure itself is untouched


def test_a_subtitle_line_is_set_at_a_readable_size():
    """``<br><sup>...</sup>`` (a subtitle) becomes 12-px lines; a superscript inside a line stays."""
    text = wrap("Title<br><sup>" + "word " * 30 + "</sup>")
    lines = text.split("<br>")
    assert lines[0] == "Title" and len(lines) == 3
    assert all(line.startswith("<span style='font-size:12px'>") and line.endswith("</span>") for line in lines[1:])
    assert wrap("x = 10<sup>4</sup>") == "x = 10<sup>4</sup>"
