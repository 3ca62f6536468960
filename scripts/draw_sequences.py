"""Draw ``docs/time_series.png`` and ``docs/tokens.png`` (+ ``docs/tokens.html``): a time-series map
and a token heatmap.

    PYTHONPATH=. python scripts/draw_sequences.py [--out docs]

Time series: a small Conv1D net is trained here (a few seconds on a CPU) to tell whether a bump
appears in the first of two noisy features; Grad-CAM on its last Conv1D layer (found by default)
is drawn by ``sk.render.series`` under each feature.

Tokens: a tiny embedding model (``Embedding → mean → Dense``) is trained here to tell sentences
with more "good" than "bad" words. ``sk.explain`` explains its token ids in the embedding's space:
integrated gradients of the positive class's logit from the padding token's embedding, ``[B, 1,
T, D]``, mapped per token by summing over the embedding axis ``[B, 1, T]``. The maps are drawn by
``sk.render.tokens_html`` (the HTML file) and, as a picture for the docs, by a few lines of
matplotlib below using the same colour scale.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import saliency_kit as sk  # noqa: E402

T, FEATURES = 64, 2
GOOD = ["great", "good", "lovely", "fine", "superb"]
BAD = ["bad", "awful", "poor", "dull", "boring"]
NEUTRAL = ["the", "film", "was", "a", "plot", "and", "very", "its", "acting", "music"]
VOCABULARY = ["[PAD]"] + GOOD + BAD + NEUTRAL


def bump_series(rng, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``[count, T, 2]`` noisy series; label 1: a Gaussian bump somewhere in feature 0."""
    x = rng.normal(0.0, 0.3, (count, T, FEATURES)).astype("float32")
    x[:, :, 1] += np.sin(np.linspace(0, 6 * np.pi, T))[None].astype("float32")  # a distractor
    labels = rng.integers(0, 2, count)
    centres = rng.integers(8, T - 8, count)
    bump = np.exp(-0.5 * ((np.arange(T)[None] - centres[:, None]) / 3.0) ** 2)
    x[:, :, 0] += (2.0 * bump * labels[:, None]).astype("float32")
    return x, labels


def time_series_picture(out: Path) -> Path:
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x, y = bump_series(rng, 2000)
    model = keras.Sequential(
        [
            keras.Input((T, FEATURES)),
            keras.layers.Conv1D(16, 5, padding="same", activation="relu"),
            keras.layers.MaxPooling1D(2),
            keras.layers.Conv1D(16, 5, padding="same", activation="relu", name="last_conv"),
            keras.layers.GlobalMaxPooling1D(),
            keras.layers.Dense(2),
        ],
        name="bump_detector",
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(x, y, epochs=6, batch_size=64, verbose=0)
    test, labels = bump_series(np.random.default_rng(1), 200)
    accuracy = float(np.mean(np.argmax(model.predict(test, verbose=0), -1) == labels))
    example = test[labels == 1][:1]
    explanation = sk.explain(model, example, "gradcam", targets=1)
    figure = sk.render.series(
        explanation,
        example,
        feature_names=["signal", "distractor"],
        class_names=["no bump", "bump"],
        width_inches=7.0,
        dpi=110,
    )
    path = out / "time_series.png"
    sk.render.save_png(figure, path)
    print(f"{path}: Grad-CAM on {explanation.layer!r} of a Conv1D net (test accuracy {accuracy:.2f})")
    return path


def sentences(rng, count: int, length: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Token ids ``[count, length]`` (0-padded) and labels: 1 when good words outnumber bad ones."""
    ids = np.zeros((count, length), "int32")
    labels = np.zeros(count, "int64")
    for i in range(count):
        n = rng.integers(5, length + 1)
        words = rng.choice(len(VOCABULARY) - 1, n) + 1
        ids[i, :n] = words
        good = np.isin(words, range(1, 1 + len(GOOD))).sum()
        bad = np.isin(words, range(1 + len(GOOD), 1 + len(GOOD) + len(BAD))).sum()
        labels[i] = int(good > bad)
    return ids, labels


def draw_tokens(explanation, tokens, path: Path) -> None:
    """The token heatmap as a PNG: the colours of ``sk.render.tokens_html`` (one diverging scale
    shared by every sentence, 0 at the centre colour)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    values = [explanation.maps[b, 0, : len(row)] for b, row in enumerate(tokens)]
    unit = sk.render.normalize(np.concatenate(values), sign="all")
    colours = matplotlib.colormaps["RdBu_r"](unit)
    figure = Figure(figsize=(7.0, 0.42 * len(tokens) + 0.5), dpi=110)
    renderer = FigureCanvasAgg(figure).get_renderer()  # to measure each token's width
    at = 0
    for b, row in enumerate(tokens):
        y = 1.0 - (b + 0.7) / (len(tokens) + 0.6)
        x = 0.02
        for token in row:
            box = dict(boxstyle="round,pad=0.25", facecolor=colours[at], edgecolor="none")
            light = 0.299 * colours[at][0] + 0.587 * colours[at][1] + 0.114 * colours[at][2] > 0.55
            text = figure.text(x, y, token, fontsize=10, va="center", bbox=box, color="black" if light else "white")
            width = text.get_window_extent(renderer=renderer).width / figure.bbox.width
            x += width + 0.015
            at += 1
    figure.text(
        0.02,
        0.03,
        "blue: against \u201cpositive\u201d \u00b7 white: 0 \u00b7 red: for (integrated gradients in "
        "embedding space from the padding token, summed over the embedding axis)",
        fontsize=7.5,
        color="0.35",
    )
    sk.render.save_png(figure, path)


def token_picture(out: Path) -> tuple[Path, Path]:
    keras.utils.set_random_seed(1)
    ids, labels = sentences(np.random.default_rng(2), 3000)
    embedding = keras.layers.Embedding(len(VOCABULARY), 8, name="embedding")
    head = keras.Sequential([keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(2)], name="head")
    inputs = keras.Input((ids.shape[1],), dtype="int32")
    model = keras.Model(inputs, head(embedding(inputs)))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(ids, labels, epochs=8, batch_size=64, verbose=0)

    texts = [
        "the acting was superb and the music lovely",
        "a dull plot and very poor acting",
        "the film was good but its plot boring",
    ]
    tokens = [t.split() for t in texts]
    batch = np.zeros((len(texts), ids.shape[1]), "int32")
    for b, row in enumerate(tokens):
        batch[b, : len(row)] = [VOCABULARY.index(w) if w in VOCABULARY else 0 for w in row]
    explanation = sk.explain(model, batch, "integrated_gradients", targets=1, steps=32)  # embedding space
    html_path = out / "tokens.html"
    html_path.write_text(
        sk.render.tokens_html(explanation, tokens, class_names=["negative", "positive"]) + "\n", encoding="utf-8"
    )
    png_path = out / "tokens.png"
    draw_tokens(explanation, tokens, png_path)
    gap = float(np.abs(explanation.completeness_gap).max())
    print(f"{png_path}, {html_path}: integrated gradients of token ids, a tiny text classifier (max |gap| {gap:.1e})")
    return png_path, html_path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="the folder to write the pictures to")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    time_series_picture(args.out)
    token_picture(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
