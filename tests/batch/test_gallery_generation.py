"""Generated text in the gallery: ``write_generation_outputs`` (what ``saliency explain-text --out``
writes) puts an explanation of generated text into an output folder, and the page shows it as a
card of its ``[generated × source]`` matrix — hostile tokens and prompts parsed back from the page
as text, never markup, in the data and in a real headless Chromium."""

import html.parser
import json

import numpy as np
import pytest
from test_gallery import _cards, _expected_colours, _line, _open, _png, _write_manifest, browser  # noqa: F401

import saliency_kit as sk
from saliency_kit.batch import gallery
from saliency_kit.batch.generation import write_generation_outputs
from saliency_kit.render.generation import word_matrix

TOKENS = ["<script>window.hacked=1</script>", ' "quoted"', " a&b", "<img src=x onerror=window.hacked=2>", " y", "'z'"]
START = 2
PROMPT = "</script><b>prompt</b> & 'co'"


def generation(tokens=TOKENS, start=START, method="integrated_gradients", seed=0):
    """An explanation of generated text as ``sk.explain_generation`` builds it: maps ``[1, K, T]``,
    zero at and after each row's own token, the generated tokens' log-probabilities as scores."""
    T = len(tokens)
    maps = np.random.default_rng(seed).normal(size=(1, T - start, T)).astype("float32")
    for k in range(T - start):
        maps[0, k, start + k :] = 0.0
    e = sk.Explanation(
        attributions=maps[..., None],
        maps=maps,
        targets=np.arange(T - start)[None],
        scores=-np.arange(1, T - start + 1, dtype="float32")[None],
        method=method,
        options={"start": start},
    )
    return e.with_tokens([list(tokens)])


def test_a_generation_is_written_into_a_run_and_read_back(tmp_path):
    e = generation()
    data_file, page_path = write_generation_outputs(tmp_path, e, name=PROMPT)
    assert page_path == tmp_path / "index.html" and data_file.parent.parent == tmp_path
    (record,) = [json.loads(line) for line in (tmp_path / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    generated = "".join(TOKENS[START:])
    assert record["image"] == PROMPT and record["kind"] == "generation" and record["class_name"] == generated
    assert record["score"] == pytest.approx(-10.0) and (tmp_path / record["file"]) == data_file

    rows, columns, values, hidden = word_matrix(e)
    (entry,) = gallery.gallery_data(tmp_path)["images"]
    (output,) = entry["outputs"]
    assert entry["image"] == PROMPT and output["generation"] == record["file"]
    shown = output["text"]
    assert shown["rows"] == TOKENS[START:] and shown["columns"] == TOKENS
    for r in range(len(rows)):
        for c in range(len(columns)):
            if hidden[r, c]:
                assert shown["values"][r][c] is None and shown["colours"][r][c] is None
            else:
                assert shown["values"][r][c] == pytest.approx(values[r, c], rel=1e-3)
    colours = [colour for row in shown["colours"] for colour in row if colour is not None]
    assert colours == _expected_colours(values[~hidden])  # one diverging scale over the matrix

    page = page_path.read_text(encoding="utf-8")
    scripts, tags = [], set()

    class Tags(html.parser.HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.add(tag)
            if tag == "script":
                scripts.append(dict(attrs))

    Tags().feed(page)
    assert len(scripts) == 2 and scripts[0] == {"type": "application/json", "id": "gallery-data"}
    assert "img" not in tags and "b" not in tags  # no token or prompt became an element
    assert "window.hacked" not in page.split('id="gallery-data">', 1)[0]
    block = page.split('id="gallery-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in block and "&" not in block  # JSON escapes them inside the script element
    ((image, _, outputs),) = json.loads(block)["images"]
    assert image == PROMPT and outputs[0][6]["rows"] == TOKENS[START:] and outputs[0][6]["columns"] == TOKENS
    assert scripts[1] == {} and "link" not in tags and "style" in tags  # one file: nothing fetched


def test_writing_again_replaces_one_method_and_keeps_the_others(tmp_path):
    _png(tmp_path / "photo" / "gradient-c1-pos-overlay.png")
    _write_manifest(
        tmp_path / "manifest.jsonl",
        [_line("photo.png", "gradient", 1, "pos", 0.3, "overlay", "photo/gradient-c1-pos-overlay.png", 1)],
    )
    write_generation_outputs(tmp_path, generation(seed=1), name=PROMPT)
    write_generation_outputs(tmp_path, generation(seed=2), name=PROMPT)
    write_generation_outputs(tmp_path, generation(method="gradient"), name=PROMPT, merge="words")
    write_generation_outputs(tmp_path, generation(), name="another prompt")
    lines = (tmp_path / "manifest.jsonl").read_text(encoding="utf-8").splitlines()
    assert [(r["image"], r["method"]) for r in map(json.loads, lines)] == [
        ("photo.png", "gradient"),
        (PROMPT, "integrated_gradients"),
        (PROMPT, "gradient"),
        ("another prompt", "integrated_gradients"),
    ]
    data = gallery.gallery_data(tmp_path)
    assert [i["image"] for i in data["images"]] == sorted(["photo.png", PROMPT, "another prompt"])
    assert data["missing"] == 0 and len(data["token_legend"]) == 9
    by_name = {i["image"]: i["outputs"] for i in data["images"]}
    latest = word_matrix(generation(seed=2))[2]
    shown = next(o for o in by_name[PROMPT] if o["method"] == "integrated_gradients")["text"]
    assert shown["values"][0][0] == pytest.approx(latest[0, 0], rel=1e-3)
    files = {o["generation"] for outputs in by_name.values() for o in outputs if "generation" in o}
    assert len(files) == 3  # each prompt in a folder of its own


def test_generation_files_that_are_not_what_the_writer_writes_are_left_out(tmp_path):
    bad = {
        "ragged-generation.json": {"rows": ["a"], "columns": ["a", "b"], "values": [[1.0]]},
        "strings-generation.json": {"rows": ["a"], "columns": ["a"], "values": [["1"]]},
        "labels-generation.json": {"rows": [1], "columns": ["a"], "values": [[1.0]]},
        "empty-generation.json": {"rows": ["a"], "columns": ["a"], "values": [[None]]},
        "list-generation.json": [1, 2],
    }
    for name, content in bad.items():
        (tmp_path / name).write_text(json.dumps(content))
    (tmp_path / "good-generation.json").write_text(
        json.dumps({"rows": ["b"], "columns": ["a", "b"], "values": [[2.0, None]], "colours": [["red", "red"]]})
    )
    names = [*bad, "good-generation.json"]
    _write_manifest(tmp_path / "manifest.jsonl", [_line(n, "gradient", 0, "c", 1.0, "generation", n, 1) for n in names])
    data = gallery.gallery_data(tmp_path)
    assert data["missing"] == len(bad) and [i["image"] for i in data["images"]] == ["good-generation.json"]
    assert data["images"][0]["outputs"][0]["text"]["colours"] == [[_expected_colours([2.0])[0], None]]


def test_the_page_draws_the_matrix_as_text_and_runs_no_injected_script(browser, tmp_path):  # noqa: F811
    _png(tmp_path / "photo" / "gradient-c1-pos-overlay.png")
    _write_manifest(
        tmp_path / "manifest.jsonl",
        [_line("photo.png", "gradient", 1, "pos", 0.3, "overlay", "photo/gradient-c1-pos-overlay.png", 1)],
    )
    e = generation()
    _, page = write_generation_outputs(tmp_path, e, name=PROMPT)
    _open(browser, page)
    assert sorted(c["image"] for c in _cards(browser)) == sorted(["photo.png", PROMPT])
    assert browser.execute_script("return window.hacked === undefined")
    assert browser.execute_script("return document.scripts.length") == 2
    assert browser.execute_script("return document.querySelectorAll('.card img').length") == 1  # the photo only
    shown = browser.execute_script(
        "const f = document.querySelector('figure.generation');"
        "const rows = Array.from(f.querySelectorAll('tr'));"
        "return { card: f.closest('.card').querySelector('h2').textContent,"
        " columns: Array.from(rows[0].querySelectorAll('th')).slice(1).map(t => t.textContent),"
        " rows: rows.slice(1).map(r => r.querySelector('th').textContent),"
        " elements: Array.from(f.querySelectorAll('.matrix th, .matrix td')).filter(c => c.children.length).length,"
        " colours: Array.from(f.querySelectorAll('td:not(.hidden)')).map(c => getComputedStyle(c).backgroundColor),"
        " hidden: f.querySelectorAll('td.hidden').length,"
        " caption: f.querySelector('figcaption b').textContent,"
        " gradient: getComputedStyle(f.querySelector('.token-scale')).backgroundImage };"
    )
    _, _, values, hidden = word_matrix(e)
    assert shown["card"] == PROMPT and shown["columns"] == TOKENS and shown["rows"] == TOKENS[START:]
    assert shown["elements"] == 0 and shown["hidden"] == int(hidden.sum())  # text, never markup
    rgb = [
        "rgb({}, {}, {})".format(*(int(c[i : i + 2], 16) for i in (1, 3, 5)))
        for c in _expected_colours(values[~hidden])
    ]
    assert shown["colours"] == rgb
    assert shown["caption"] == "".join(TOKENS[START:]) and shown["gradient"].startswith("linear-gradient")
    browser.save_screenshot(str(tmp_path / "gallery-generation.png"))
