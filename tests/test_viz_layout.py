"""viz.layout.tidy: one header layout for every figure (title, menus, legend, subplot titles)."""

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from transformer_lib.viz import BookRenderer
from transformer_lib.viz.layout import (LEGEND_ROW, LINE, MENU_ROW, NARROW, TITLE_CHARS, WIDE, _legend_names,
                                        _legend_rows, tidy, wrap)


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
    """On a phone (the NARROW layout) plotly.js wraps a wide horizontal legend; its second row covered
    the top of chapter 12's memory calculator (the 80 GB line) until tidy made room for it."""
    names = ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP", "ZeRO-3 + checkpointing"]

    def figure(names):
        fig = go.Figure([go.Scatter(y=[1, 2], name=n) for n in names])
        fig.update_layout(height=460, title="t", legend=dict(orientation="h", y=1.02, yanchor="bottom"))
        return tidy(fig.to_dict(), width=NARROW)["layout"]

    rows = _legend_rows(names, NARROW)
    assert rows > 1 and _legend_rows(names[:2], NARROW) == 1 and _legend_rows(names, WIDE) < rows + 1
    assert figure(names)["margin"]["t"] == figure(names[:2])["margin"]["t"] + (rows - 1) * LEGEND_ROW
    # the same names again (one set per dropdown choice) are one legend, not two
    hidden = go.Figure([go.Scatter(y=[1], name=n, visible=False, legendgroup=n) for n in names[:2] * 3]).to_dict()
    assert _legend_names(hidden) == names[:2]


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


# ---- the narrow (phone) layout -------------------------------------------------------------------
from transformer_lib.viz.layout import NARROW, WIDE, narrow_patch, title_chars  # noqa: E402


def two_traces(**layout) -> dict:
    fig = go.Figure([go.Scatter(y=[1, 2], name="the first entry"), go.Scatter(y=[2, 1], name="the second entry")])
    return fig.update_layout(height=400, **layout).to_dict()


def test_narrow_titles_wrap_to_the_phone_and_keep_their_breaks():
    title = "word " * 30 + "<br><sup>a subtitle line</sup>"
    wide = tidy(two_traces(title=title))["layout"]["title"]["text"]
    narrow = tidy(two_traces(title=title), width=NARROW)["layout"]["title"]["text"]
    assert narrow.count("<br>") > wide.count("<br>")
    assert all(len(line) <= title_chars(NARROW) for line in narrow.split("<br>")[:-1] if "<span" not in line)
    assert "a subtitle line" in narrow.split("<br>")[-1]


def test_narrow_legend_moves_above_the_plot_in_rows():
    narrow = tidy(two_traces(title="t"), width=NARROW)["layout"]
    assert narrow["legend"]["orientation"] == "h" and narrow["legend"]["yanchor"] == "top"
    assert narrow["legend"]["y"] > 1  # above the plot area, in the header
    wide = tidy(two_traces(title="t"))["layout"]
    assert "orientation" not in (wide.get("legend") or {})  # the wide layout keeps plotly's column


def test_narrow_button_row_too_wide_becomes_a_dropdown_and_menus_stack():
    buttons = [dict(label=f"choice number {i}", method="relayout", args=[{"title.text": f"t{i}"}]) for i in range(6)]
    menus = [dict(type="buttons", direction="right", buttons=buttons, y=1.1, yanchor="bottom"),
             dict(buttons=buttons[:2], x=0.6, y=1.1, yanchor="bottom")]
    wide = tidy(two_traces(title="t", updatemenus=menus))["layout"]["updatemenus"]
    narrow = tidy(two_traces(title="t", updatemenus=menus), width=NARROW)["layout"]["updatemenus"]
    assert wide[0]["type"] == "buttons" and narrow[0]["type"] == "dropdown"
    assert wide[0]["y"] == wide[1]["y"]  # one row on a wide figure
    assert narrow[0]["y"] > narrow[1]["y"] and narrow[1]["x"] == 0  # stacked on a phone, from the left


def test_narrow_patch_lists_only_what_changes():
    plain = go.Figure(go.Bar(y=[1]))
    assert narrow_patch(plain.to_dict()) == ({"margin": None}, {"margin": {"l": 50, "r": 20}})  # narrower sides
    assert narrow_patch(plain.update_layout(margin=dict(l=40, r=10)).to_dict()) == ({}, {})
    wide, narrow = narrow_patch(two_traces(title="t"))
    assert set(wide) == set(narrow) and "legend" in narrow and wide["legend"] is None


def test_the_book_renderer_carries_the_narrow_layout_when_there_is_one():
    html = BookRenderer().to_mimebundle(two_traces(title="t"))["text/html"]
    assert f"}}, {WIDE});</script>" in html and "ResizeObserver" in html
    plain = go.Figure(go.Bar(y=[1])).update_layout(margin=dict(l=40, r=10))  # fits a phone as it is
    assert "ResizeObserver" not in BookRenderer().to_mimebundle(plain.to_dict())["text/html"]
