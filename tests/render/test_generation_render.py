"""``sk.render.generation_html`` and ``generation_figure``: the ``[generated × source]`` matrix,
hostile tokens parsed back as text, words merged, and the figure's labels and legend."""

from html.parser import HTMLParser

import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit.render.generation import word_groups, word_matrix

HOSTILE = ["<script>alert(1)</script>", ' "quoted"', " a&b", " x", "y", " <b", "'z'"]
START = 3


def fake_explanation(tokens=HOSTILE, start=START, seed=0):
    """An explanation of generated text as explain_generation builds it, maps [1, K, T] with the future zero."""
    T = len(tokens)
    maps = np.random.default_rng(seed).normal(size=(1, T - start, T)).astype("float32")
    for k in range(T - start):
        maps[0, k, start + k :] = 0.0
    e = sk.Explanation(
        attributions=maps[..., None],
        maps=maps,
        targets=np.arange(T - start)[None],
        scores=np.zeros((1, T - start), "float32"),
        method="integrated_gradients",
        options={"start": start},
    )
    return e.with_tokens([list(tokens)])


class Reader(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.cells, self.text = [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag in ("th", "td"):
            self.text = ""

    def handle_endtag(self, tag):
        if tag in ("th", "td"):
            self.cells.append((tag, self.text))
            self.text = None

    def handle_data(self, data):
        if self.text is not None:
            self.text += data


def test_hostile_tokens_come_back_as_text_and_add_no_markup():
    page = sk.render.generation_html(fake_explanation())
    reader = Reader()
    reader.feed(page)
    assert "script" not in reader.tags and "b" not in reader.tags
    headers = [text for tag, text in reader.cells if tag == "th"]
    assert headers[1 : 1 + len(HOSTILE)] == HOSTILE  # the column labels, as given
    assert headers[1 + len(HOSTILE) :] == HOSTILE[START:]  # one row per generated token
    values = [text for tag, text in reader.cells if tag == "td"]
    K, T = len(HOSTILE) - START, len(HOSTILE)
    assert len(values) == K * T
    assert sum(1 for v in values if v == "") == sum(T - (START + k) for k in range(K))  # the hidden cells
    assert "linear-gradient" in page  # the legend


def test_words_merge_sub_words_and_sum_their_maps():
    tokens = ["<s>", " un", "believ", "able", " story", " is", " tr", "ue", "."]
    assert word_groups(tokens, 5) == [[0], [1, 2, 3], [4], [5], [6, 7], [8]]
    e = fake_explanation(tokens, start=5, seed=1)
    rows, columns, values, hidden = word_matrix(e, "words")
    assert rows == [" is", " true", "."] and columns == ["<s>", " unbelievable", " story", " is", " true", "."]
    maps = e.maps[0]
    np.testing.assert_allclose(values[1, 1], maps[1:3, 1:4].sum(), rtol=1e-6)  # rows " tr", "ue"; columns 1-3
    np.testing.assert_allclose(values[1, 4], maps[2, 6], rtol=1e-6)  # "ue" explained by " tr"
    assert hidden.tolist() == [[False] * 3 + [True] * 3, [False] * 5 + [True], [False] * 5 + [True]]
    with pytest.raises(ValueError, match="merge"):
        word_matrix(e, "letters")


def test_the_figure_has_token_labels_a_diverging_scale_and_a_legend():
    figure = sk.render.generation_figure(fake_explanation(tokens=["a", " $x$", " b", " c"], start=2))
    image_axes, legend = figure.axes
    assert [t.get_text() for t in image_axes.get_xticklabels()] == ["a", r" \$x\$", " b", " c"]
    assert [t.get_text() for t in image_axes.get_yticklabels()] == [" b", " c"]
    low, high = image_axes.images[0].get_clim()
    assert low == -high > -np.inf and high > 0
    assert "against" in legend.get_ylabel()
    assert sk.render.png_bytes(figure)[:4] == b"\x89PNG"


def test_an_explanation_of_something_else_is_refused():
    e = fake_explanation()
    plain = sk.Explanation(e.attributions, e.maps, e.targets, e.scores, e.method, options={})
    with pytest.raises(ValueError, match="explain_generation"):
        sk.render.generation_html(plain)


def test_a_notebook_shows_the_matrix():
    e = fake_explanation()
    assert e._repr_html_() == sk.render.generation_html(e)
