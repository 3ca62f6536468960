"""The static gallery: what it reads from a manifest, and what a real headless Chromium shows.

The browser tests load ``index.html`` from disk in Debian's Chromium through Selenium and check
what the page shows: every image loads, filters narrow the cards, sorting orders them by score,
and paging walks 2,500 images. They are skipped, with the reason, only where no Chromium or
chromedriver is installed (``apt-get install chromium chromium-driver``; ``pip install selenium``).
"""

import html.parser
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

import numpy as np
import pytest
from PIL import Image

from saliency_kit.batch import gallery

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOSTILE = [
    "quote \" and ' here",
    "</script><script>window.hacked=1</script>",
    "<b>bold</b> & co",
    "ünïcødé 猫 🐈",
    "100% #hash ?query",
]


def _png(path: pathlib.Path, colour=(200, 40, 40), size=(48, 32)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((size[1], size[0], 3), colour, np.uint8)).save(path)


def _line(image, method, cls, name, score, kind, file, outputs=2):
    return {
        "image": image,
        "status": "ok",
        "method": method,
        "class": cls,
        "class_name": name,
        "score": score,
        "kind": kind,
        "file": file,
        "outputs": outputs,
    }


def _write_manifest(path: pathlib.Path, records, *, cut_off: str = "") -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        handle.write(cut_off)


# ----------------------------------------------------------------------------- data, no browser
def test_data_groups_outputs_by_image_and_survives_resume_shards_and_damage(tmp_path):
    for name in ("a/gc-overlay.png", "a/gc-heatmap.png", "b/gb-overlay.png", "c/gb-overlay.png"):
        _png(tmp_path / name)
    first = [
        _line("a.png", "gradcam", 3, "cat", 2.5, "overlay", "a/gc-overlay.png"),
        _line("a.png", "gradcam", 3, "cat", 2.5, "heatmap", "a/gc-heatmap.png"),
        {"image": "bad.png", "status": "failed", "error": "cannot identify image file"},
        _line("b.png", "guided_backprop", 1, "dog", -1.0, "overlay", "b/gb-overlay.png"),
        _line("gone.png", "gradcam", 3, "cat", 9.0, "overlay", "gone/gc-overlay.png"),
        _line("evil.png", "gradcam", 3, "cat", 9.0, "overlay", "../outside.png"),
        _line("evil.png", "gradcam", 3, "cat", 9.0, "heatmap", "link/outside.png"),
        _line("evil.png", "gradcam", 3, "cat", 9.0, "npz", "a/../b/gb-overlay.png"),
        _line("odd.png", "gradcam", [3], "cat", "high", "overlay", ["not", "a", "name"]),
        _line("a.png", "gradcam", 3, "cat", 2.5, "thumbnail", "a/gc-overlay.png"),  # a kind not shown
        "not an object",
        ["nor", "this"],
    ]
    _write_manifest(
        tmp_path / "manifest.jsonl",
        first + first[:2],  # a resume repeats two lines
        cut_off='{"image": "c.png", "status": "ok", "meth',
    )  # killed mid-line
    _write_manifest(
        tmp_path / "manifest.shard-2-of-2.jsonl",
        [_line("c.png", "guided_backprop", 1, "dog", 0.5, "overlay", "c/gb-overlay.png")],
    )
    (tmp_path.parent / "outside.png").write_bytes(b"a file, but outside the output folder")
    (tmp_path / "link").symlink_to(tmp_path.parent)  # a folder link that leads out
    data = gallery.gallery_data(tmp_path)
    assert [i["image"] for i in data["images"]] == ["a.png", "b.png", "c.png"]
    (a_out,) = data["images"][0]["outputs"]
    assert a_out == {
        "method": "gradcam",
        "class": 3,
        "class_name": "cat",
        "score": 2.5,
        "overlay": "a/gc-overlay.png",
        "heatmap": "a/gc-heatmap.png",
    }
    assert data["failed"] == [{"image": "bad.png", "error": "cannot identify image file"}]
    assert data["missing"] == 5  # gone.png's file, three paths that leave (or go round) the folder, a list
    assert [m["name"] for m in data["methods"]] == ["gradcam", "guided_backprop"]
    assert [m["title"] for m in data["methods"]] == ["Grad-CAM", "Guided Backprop"]
    assert data["classes"] == ["cat", "dog"]


def test_hostile_names_are_data_never_markup(tmp_path):
    records = []
    for i, name in enumerate(HOSTILE):
        _png(tmp_path / f"f{i}.png")
        _png(tmp_path / f"{name} {i}".replace("/", "_") / "photo.png")  # a hostile photo path
        line = _line(name + ".png", HOSTILE[-1 - i], i, name, float(i), "overlay", f"f{i}.png", 1)  # hostile methods
        records.append({**line, "photo": f"{name} {i}".replace("/", "_") + "/photo.png"})
    _write_manifest(tmp_path / "manifest.jsonl", records)
    rows = [{"method": m, "metric": m, "higher_is_better": True, "per_input": [1.0] * 5} for m in HOSTILE]
    (tmp_path / "metrics.json").write_text(json.dumps({"images": [f"/in/{n}.png" for n in HOSTILE], "rows": rows}))
    data = gallery.gallery_data(tmp_path)
    assert [m["name"] for m in data["metric_names"]] == HOSTILE  # hostile metric names, read as data
    assert sorted(i["photo"] for i in data["images"]) == sorted(r["photo"] for r in records)
    page = gallery.write_gallery(tmp_path, title='run <1> & "2"').read_text(encoding="utf-8")
    assert page.count("</script>") == 2  # the data block's and the code's, nothing from the data
    assert "<b>bold" not in page and "<1>" not in page and "<script>window" not in page
    assert "<title>run &lt;1&gt; &amp; &quot;2&quot;</title>" in page
    block = page.split('id="gallery-data">', 1)[1].split("</script>", 1)[0]
    assert [image for image, _, _ in json.loads(block)["images"]] == sorted(n + ".png" for n in HOSTILE)


def test_write_gallery_refuses_a_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="received"):
        gallery.write_gallery(tmp_path / "nope")


def test_an_empty_run_still_gets_a_page(tmp_path):
    path = gallery.write_gallery(tmp_path)
    assert path == tmp_path / "index.html" and "gallery-data" in path.read_text(encoding="utf-8")


# ----------------------------------------------------------------------------- the browser
def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        browser = shutil.which(name)
        if browser:
            break
    else:
        return None, "no Chromium installed (apt-get install chromium chromium-driver)"
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None
    )
    if driver is None:
        return None, "no chromedriver installed (apt-get install chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return None, "selenium is not installed (pip install -e '.[test]')"
    return (browser, driver), ""


@pytest.fixture(scope="module")
def browser():
    found, reason = _chromium()
    if found is None:
        print(f"\nSKIPPING the gallery browser tests: {reason}")
        pytest.skip(f"gallery browser tests need a real Chromium: {reason}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="gallery-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(found[1]), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(driver, path: pathlib.Path) -> None:
    driver.get(path.resolve().as_uri())
    _wait(driver, "return document.readyState === 'complete'")


def _wait(driver, script: str, timeout: float = 20.0):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: d.execute_script(script))


def _cards(driver) -> list[dict]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('.card')).map(c => ({image: c.dataset.image,"
        " score: c.dataset.score === '' ? null : +c.dataset.score, title: c.querySelector('h2').firstChild.textContent,"
        " classes: Array.from(c.querySelectorAll('figcaption b')).map(b => b.textContent),"
        " methods: Array.from(c.querySelectorAll('th')).map(t => t.textContent)}))"
    )


def _type(driver, element_id: str, text: str) -> None:
    box = driver.find_element("id", element_id)
    box.clear()
    if text:
        box.send_keys(text)
    else:  # clear() sends no input event
        driver.execute_script("arguments[0].dispatchEvent(new Event('input'))", box)


def _select(driver, element_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", element_id)).select_by_value(value)


def _all_images_loaded(driver) -> list[int]:
    driver.execute_script("document.querySelectorAll('img').forEach(i => i.loading = 'eager')")
    _wait(driver, "return Array.from(document.images).every(i => i.complete)")
    return driver.execute_script("return Array.from(document.images).map(i => i.naturalWidth)")


@pytest.fixture(scope="module")
def batch_run(tmp_path_factory):
    """A real ``saliency batch`` run on the shipped ``shapes`` model: the manifest and files it writes."""
    root = tmp_path_factory.mktemp("batch")
    images = root / "in"
    for i, name in enumerate(["disc.png", "bar.png", "sub dir/tall box.png", "ünï.png"]):
        picture = np.full((64, 64, 3), 25, np.uint8)
        yy, xx = np.mgrid[:64, :64]
        if i % 2 == 0:
            picture[(yy - 30 - i) ** 2 + (xx - 32) ** 2 < 180] = (230, 210, 60)
        else:
            picture[12 + i : 50, 20 : 40 + i] = (60, 200, 230)
        (images / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(picture).save(images / name)
    out = root / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "saliency_kit",
            "batch",
            str(images),
            "--out",
            str(out),
            "--method",
            "guided_backprop",
            "--method",
            "gradcam",
            "--target",
            "top2",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_the_page_of_a_resumed_run_shows_the_whole_run(batch_run, tmp_path):
    """A run resumed with one more image: the rebuilt page has every image, each once."""
    out = tmp_path / "out"
    shutil.copytree(batch_run, out)
    shutil.copytree(batch_run.parent / "in", tmp_path / "in")
    _png(tmp_path / "in" / "late arrival.png", colour=(240, 240, 30), size=(64, 64))
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "saliency_kit",
            "batch",
            str(tmp_path / "in"),
            "--out",
            str(out),
            "--method",
            "guided_backprop",
            "--method",
            "gradcam",
            "--target",
            "top2",
            "--resume",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    before = gallery.gallery_data(batch_run)
    after = gallery.gallery_data(out)
    assert sorted(i["image"] for i in after["images"]) == sorted(
        [i["image"] for i in before["images"]] + ["late arrival.png"]
    )
    assert all(len(i["outputs"]) == 4 for i in after["images"])  # 2 methods x 2 classes, none doubled
    assert after["missing"] == 0 and after["failed"] == []


def test_a_real_batch_run_shows_every_image_and_filters_and_sorts(browser, batch_run):
    path = gallery.write_gallery(batch_run)
    records = [json.loads(line) for line in (batch_run / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    _open(browser, path)
    cards = _cards(browser)
    assert sorted(c["image"] for c in cards) == sorted({r["image"] for r in records})
    widths = _all_images_loaded(browser)
    # photo + heatmap: two layers per panel
    assert len(widths) == 2 * len({r["file"] for r in records if r["kind"] == "overlay"}) and min(widths) > 0
    assert set(cards[0]["methods"]) == {"Guided Backprop", "Grad-CAM"}

    # Sorted by score, highest first: each card's score is its best, in descending order.
    best = {}
    for r in records:
        best[r["image"]] = max(best.get(r["image"], -np.inf), r["score"])
    assert [c["score"] for c in cards] == pytest.approx(sorted(best.values(), reverse=True))
    assert [c["image"] for c in cards] == sorted(best, key=lambda i: -best[i])
    _select(browser, "sort", "score-asc")
    assert [c["image"] for c in _cards(browser)] == sorted(best, key=lambda i: best[i])

    # A class filter narrows to the images that have that class, and to its panels only.
    name = records[0]["class_name"]
    having = {r["image"] for r in records if r["class_name"] == name}
    _type(browser, "class-filter", name)
    narrowed = _cards(browser)
    assert {c["image"] for c in narrowed} == having and set(sum((c["classes"] for c in narrowed), [])) == {name}
    shot = batch_run / "gallery-filtered.png"
    browser.save_screenshot(str(shot))
    _type(browser, "class-filter", "")
    # Unticking a method removes its row from every card.
    browser.find_element("css selector", "#methods input[value='gradcam']").click()
    assert all(c["methods"] == ["Guided Backprop"] for c in _cards(browser))
    browser.find_element("css selector", "#methods input[value='gradcam']").click()
    # Heatmaps instead of overlays: other files, all loading.
    _select(browser, "show", "heatmap")
    sources = browser.execute_script("return Array.from(document.images).map(i => i.getAttribute('src'))")
    assert sources and all(s.endswith("-heatmap.png") for s in sources)
    assert min(_all_images_loaded(browser)) > 0
    _select(browser, "show", "layers")
    _select(browser, "sort", "score-desc")
    browser.save_screenshot(str(batch_run / "gallery.png"))
    with Image.open(batch_run / "gallery.png") as picture, Image.open(shot) as filtered:
        assert picture.size[0] > 600 and filtered.size == picture.size
    print(f"\ngallery screenshots: {batch_run / 'gallery.png'} and {shot}")


def test_paging_walks_2500_images_with_hostile_names(browser, tmp_path):
    rng = np.random.default_rng(0)
    _png(tmp_path / "base.png", size=(40, 30))
    records, scores = [], {}
    for i in range(2500):
        image = f"{HOSTILE[i % len(HOSTILE)]} {i:04d}.png"
        for method in ("gradient", "gradcam"):
            file = f'img{i:04d}/{method} #%?"<&ü-overlay.png'  # URL-special characters
            (tmp_path / file).parent.mkdir(exist_ok=True)
            os.link(tmp_path / "base.png", tmp_path / file)
            score = float(rng.normal())
            scores[image] = max(scores.get(image, -np.inf), score)
            records.append(_line(image, method, i % 7, f"class {i % 7} <{i % 7}>", score, "overlay", file))
    _write_manifest(tmp_path / "manifest.jsonl", records)
    _open(browser, gallery.write_gallery(tmp_path, page_size=40))
    ranked = sorted(scores, key=lambda i: (-scores[i], int(i[-8:-4])))
    assert browser.find_element("id", "page-info").text == "page 1 of 63"
    assert [c["image"] for c in _cards(browser)] == ranked[:40]
    assert [c["title"] for c in _cards(browser)] == ranked[:40]  # text as is: quotes, tags, emoji
    assert browser.execute_script("return window.hacked === undefined")
    browser.find_element("id", "next").click()
    assert [c["image"] for c in _cards(browser)] == ranked[40:80]
    assert browser.find_element("id", "page-info").text == "page 2 of 63"
    for _ in range(70):  # past the end: the button stops at the last page
        if not browser.find_element("id", "next").is_enabled():
            break
        browser.find_element("id", "next").click()
    assert browser.find_element("id", "page-info").text == "page 63 of 63"
    assert [c["image"] for c in _cards(browser)] == ranked[2480:]
    assert min(_all_images_loaded(browser)) > 0
    # A filter narrows the whole run and starts again at page 1.
    _type(browser, "class-filter", "class 3 <3>")
    expected = [i for i in ranked if int(i[-8:-4]) % 7 == 3]
    assert browser.find_element("id", "page-info").text == f"page 1 of {-(-len(expected) // 40)}"
    assert [c["image"] for c in _cards(browser)] == expected[:40]
    _type(browser, "image-filter", HOSTILE[1] + " 0001")
    assert _cards(browser) == []  # image 1 is of class 1: both filters apply
    assert browser.find_element("css selector", "#cards .none").text == "No image matches these filters."
    _type(browser, "class-filter", "")
    (card,) = _cards(browser)
    assert card["title"] == HOSTILE[1] + " 0001.png" and card["classes"] == ["class 1 <1>"] * 2
    _select(browser, "page-size", "200")
    _type(browser, "image-filter", "")
    assert browser.find_element("id", "page-info").text == "page 1 of 13"
    assert len(_cards(browser)) == 200
    browser.save_screenshot(str(tmp_path / "gallery-2500.png"))


def test_the_page_links_the_metrics_of_saliency_evaluate_when_present(tmp_path):
    from saliency_kit.batch.gallery import gallery_data, write_gallery

    assert gallery_data(tmp_path)["metrics"] == []
    (tmp_path / "metrics.png").write_bytes(b"png")
    (tmp_path / "metrics.csv").write_text("method,metric\n")
    assert gallery_data(tmp_path)["metrics"] == ["metrics.png", "metrics.csv"]
    page = write_gallery(tmp_path).read_text()
    assert 'id="metrics"' in page and '"metrics.png"' in page


# ----------------------------------------------------------------------------- token explanations
TOKENS = [
    ["<script>window.hacked=1</script>", "it's", '"quoted"', "a & b", "<img src=x onerror=window.hacked=2>", "ok"],
    ["ünï", "</span></div>", "&amp;", "plain", "x"],
]


@pytest.fixture(scope="module")
def text_explanation():
    """A dict-input text classifier explained at its embedding: maps ``[2, 2, 6]``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    import saliency_kit as sk

    keras.utils.set_random_seed(9)
    ids, mask = (
        keras.Input((6,), dtype="int32", name="token_ids"),
        keras.Input((6,), dtype="int32", name="padding_mask"),
    )
    hidden = keras.layers.Dense(4, activation="tanh")(keras.layers.Embedding(13, 5)(ids))
    kept = hidden * keras.ops.expand_dims(keras.ops.cast(mask, "float32"), -1)
    model = keras.Model({"token_ids": ids, "padding_mask": mask}, keras.layers.Dense(3)(keras.layers.Flatten()(kept)))
    padding = np.array([[1] * 6, [1] * 5 + [0]], "int32")
    x = {
        "token_ids": np.random.default_rng(9).integers(1, 13, (2, 6)).astype("int32") * padding,
        "padding_mask": padding,
    }
    return sk.explain(model, x, "integrated_gradients", targets=[[0, 2], [2, 2]], steps=8)


def _expected_colours(values) -> list[str]:
    """Each value's colour on RdBu_r, the scale's ends at ±(99th percentile of |values|)."""
    import matplotlib

    cmap = matplotlib.colormaps["RdBu_r"]
    values = np.asarray(values, np.float64)
    scale = np.percentile(np.abs(values), 99)
    unit = (np.clip(values / scale, -1, 1) + 1) / 2
    out = []
    for u in unit:
        r, g, b = (round(c * 255) for c in cmap(min(int(u * cmap.N), cmap.N - 1))[:3])
        out.append(f"#{r:02x}{g:02x}{b:02x}")
    return out


def test_token_explanations_are_written_into_a_run_and_read_back(tmp_path, text_explanation):
    from saliency_kit.batch.tokens import write_token_outputs

    e = text_explanation
    names = ["review <1> & co", "review 'two'"]
    path = write_token_outputs(tmp_path, e, TOKENS, names=names, class_names=["neg", "pos", '<i>"odd"</i>'])
    assert path == tmp_path / "index.html"
    lines = [json.loads(line) for line in (tmp_path / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    # the second text asks class 2 twice: written once
    assert [(r["image"], r["class"], r["kind"], r["outputs"]) for r in lines] == [
        (names[0], 0, "tokens", 2),
        (names[0], 2, "tokens", 2),
        (names[1], 2, "tokens", 1),
    ]
    maps = e.map_of("token_ids")
    for record, (b, k) in zip(lines, [(0, 0), (0, 1), (1, 0)]):
        assert record["file"].endswith("-tokens.json") and record["score"] == pytest.approx(float(e.scores[b, k]))
        content = json.loads((tmp_path / record["file"]).read_text(encoding="utf-8"))
        assert content["tokens"] == TOKENS[b] and content["method"] == "integrated_gradients"
        np.testing.assert_allclose(content["values"], maps[b, k, : len(TOKENS[b])], rtol=1e-6)

    data = gallery.gallery_data(tmp_path)
    assert [i["image"] for i in data["images"]] == sorted(names) and data["missing"] == 0
    by_name = {i["image"]: i["outputs"] for i in data["images"]}
    for record, (b, k) in zip(lines, [(0, 0), (0, 1), (1, 0)]):
        (shown,) = [o for o in by_name[record["image"]] if o["class"] == record["class"]]
        values = maps[b, k, : len(TOKENS[b])]
        assert shown["tokens"] == record["file"] and shown["text"]["tokens"] == TOKENS[b]
        np.testing.assert_allclose(shown["text"]["values"], values, rtol=1e-3)
        assert shown["text"]["colours"] == _expected_colours(values)  # one diverging scale per output
        assert shown["text"]["scale"] == pytest.approx(np.percentile(np.abs(values), 99), rel=1e-2)
    assert len(data["token_legend"]) == 9

    # Written again under the same names: replaced, not doubled.
    write_token_outputs(tmp_path, e, TOKENS, names=names)
    assert len((tmp_path / "manifest.jsonl").read_text(encoding="utf-8").splitlines()) == 3

    page = path.read_text(encoding="utf-8")
    scripts, tags = [], set()

    class Tags(html.parser.HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.add(tag)
            if tag == "script":
                scripts.append(dict(attrs))

    Tags().feed(page)
    assert len(scripts) == 2 and scripts[0] == {"type": "application/json", "id": "gallery-data"}
    assert "img" not in tags and "i" not in tags  # no token, name or class name became an element
    assert "<script>window" not in page and "<img src=x" not in page and "</span></div>" not in page
    block = page.split('id="gallery-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in block and "&" not in block  # JSON escapes them inside the script element
    texts = [o[6]["tokens"] for _, _, outputs in json.loads(block)["images"] for o in outputs]
    assert sorted(map(tuple, texts)) == sorted(map(tuple, [TOKENS[0], TOKENS[0], TOKENS[1]]))


def test_token_files_that_are_not_what_the_writer_writes_are_left_out(tmp_path):
    bad = {
        "strings.json": {"tokens": ["a", "b"], "values": ["1", "2"]},
        "lengths.json": {"tokens": ["a", "b"], "values": [1.0]},
        "objects.json": {"tokens": [{"x": 1}], "values": [1.0]},
        "nan.json": {"tokens": ["a"], "values": [float("nan")]},
        "list.json": [1, 2],
    }
    for name, content in bad.items():
        (tmp_path / name).write_text(json.dumps(content))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "good.json").write_text(json.dumps({"tokens": ["a", "b"], "values": [1.0, -1.0], "colours": ["red"]}))
    names = [*bad, "broken.json", "good.json"]
    _write_manifest(tmp_path / "manifest.jsonl", [_line(n, "gradient", 0, "c", 1.0, "tokens", n, 1) for n in names])
    data = gallery.gallery_data(tmp_path)
    assert data["missing"] == len(names) - 1 and [i["image"] for i in data["images"]] == ["good.json"]
    (output,) = data["images"][0]["outputs"]
    assert output["text"]["colours"] == _expected_colours([1.0, -1.0])  # computed here, never read


def test_a_run_with_texts_and_images_shows_token_spans_and_runs_no_injected_script(browser, tmp_path, text_explanation):
    from saliency_kit.batch.tokens import write_token_outputs

    _png(tmp_path / "photo" / "gradient-c1-pos-overlay.png")
    _write_manifest(
        tmp_path / "manifest.jsonl",
        [_line("photo.png", "gradient", 1, "pos", 0.3, "overlay", "photo/gradient-c1-pos-overlay.png", 1)],
    )
    names = ["<b>first</b> text", "second & 'last'"]
    path = write_token_outputs(tmp_path, text_explanation, TOKENS, names=names, class_names=["neg", "pos", "odd"])
    _open(browser, path)
    _select(browser, "sort", "name")
    cards = _cards(browser)
    assert [c["image"] for c in cards] == sorted([*names, "photo.png"])
    assert [c["title"] for c in cards] == sorted([*names, "photo.png"])  # names as text
    assert browser.execute_script("return window.hacked === undefined")
    assert browser.execute_script("return document.scripts.length") == 2
    assert browser.execute_script("return document.querySelectorAll('.card img').length") == 1  # the photo only
    shown = browser.execute_script(
        "return Array.from(document.querySelectorAll('figure.tokens')).map(f => ({"
        " card: f.closest('.card').dataset.image,"
        " tokens: Array.from(f.querySelectorAll('.token')).map(s => s.textContent),"
        " elements: f.querySelectorAll('.token *').length,"
        " colours: Array.from(f.querySelectorAll('.token')).map(s => getComputedStyle(s).backgroundColor),"
        " legend: f.querySelector('.token-legend').textContent,"
        " gradient: getComputedStyle(f.querySelector('.token-scale')).backgroundImage,"
        " caption: f.querySelector('figcaption b').textContent}))"
    )
    maps = text_explanation.map_of("token_ids")
    expected = {
        (names[0], "neg"): (TOKENS[0], maps[0, 0, :6]),
        (names[0], "odd"): (TOKENS[0], maps[0, 1, :6]),
        (names[1], "odd"): (TOKENS[1], maps[1, 0, :5]),
    }
    assert sorted((f["card"], f["caption"]) for f in shown) == sorted(expected)
    for figure in shown:
        tokens, values = expected[(figure["card"], figure["caption"])]
        assert figure["tokens"] == tokens and figure["elements"] == 0  # text, never markup
        rgb = ["rgb({}, {}, {})".format(*(int(c[i : i + 2], 16) for i in (1, 3, 5))) for c in _expected_colours(values)]
        assert figure["colours"] == rgb
        assert figure["gradient"].startswith("linear-gradient") and "centre colour" in figure["legend"]
    # the class filter narrows texts as it narrows images
    _type(browser, "class-filter", "odd")
    assert sorted(c["image"] for c in _cards(browser)) == sorted(names)
    _type(browser, "class-filter", "")
    browser.save_screenshot(str(tmp_path / "gallery-tokens.png"))


# ----------------------------------------------------------------------------- working in the gallery
def _records(out: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]


def _key(driver, key: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(key).perform()


def _selected(driver):
    return driver.execute_script("const c = document.querySelector('.card.selected'); return c && c.dataset.image")


def _panels(driver) -> list[tuple[str, str]]:
    """(row's method title, shown file) of every panel on the page."""
    panels = driver.execute_script(
        "return Array.from(document.querySelectorAll('#cards figure')).map(f => [f.closest('tr').querySelector('th')"
        ".textContent, (f.querySelector('img.heat') || f.querySelector('img')).getAttribute('src')])"
    )
    return [(title, urllib.parse.unquote(src)) for title, src in panels]


def test_the_photo_under_the_maps_is_the_input_image_and_named_on_its_png_lines(batch_run):
    records = _records(batch_run)
    pngs = [r for r in records if r["kind"] in ("heatmap", "overlay")]
    assert pngs and all(r["photo"] == r["file"].rsplit("/", 1)[0] + "/photo.png" for r in pngs)
    for image in {r["image"] for r in records}:
        (photo,) = {r["photo"] for r in pngs if r["image"] == image}
        with Image.open(batch_run / photo) as shown, Image.open(batch_run.parent / "in" / image) as given:
            assert np.array_equal(np.asarray(shown.convert("RGB")), np.asarray(given.convert("RGB")))
    # the photo is not an output: each image still announces its 4 maps x 2 kinds
    assert {r["outputs"] for r in records} == {8} and not any(r["file"].endswith("photo.png") for r in records)


def test_toggles_sorting_opacity_filters_and_keys_in_a_real_run(browser, batch_run):
    records = _records(batch_run)
    _open(browser, gallery.write_gallery(batch_run))
    heatmaps = {r["file"] for r in records if r["kind"] == "heatmap"}

    # Every method's heatmaps, laid over the photos; unticking a method removes exactly its panels.
    assert sorted(f for _, f in _panels(browser)) == sorted(heatmaps)
    browser.find_element("css selector", "#methods input[value='gradcam']").click()
    shown = _panels(browser)
    assert sorted(f for _, f in shown) == sorted(f for f in heatmaps if "/guided_backprop-" in f)
    assert {t for t, _ in shown} == {"Guided Backprop"}
    _key(browser, "2")  # the second method's key ticks it again
    assert sorted(f for _, f in _panels(browser)) == sorted(heatmaps)

    # Sorting: the order of the manifest's best scores, both ways.
    best: dict[str, float] = {}
    for r in records:
        best[r["image"]] = max(best.get(r["image"], -np.inf), r["score"])
    ranked = sorted(best, key=lambda i: -best[i])
    assert [c["image"] for c in _cards(browser)] == ranked
    _select(browser, "sort", "score-asc")
    assert [c["image"] for c in _cards(browser)] == ranked[::-1]
    _select(browser, "sort", "score-desc")

    # Opacity: the heat layer's computed opacity follows the slider and the + / - keys.
    slider = browser.find_element("id", "opacity")
    browser.execute_script("arguments[0].value = 20; arguments[0].dispatchEvent(new Event('input'))", slider)
    opacities = browser.execute_script(
        "return Array.from(document.querySelectorAll('img.heat')).map(i => getComputedStyle(i).opacity)"
    )
    assert len(opacities) == len(heatmaps) and set(opacities) == {"0.2"}
    browser.find_element("tag name", "h1").click()  # keys go to the page, not to the sort menu
    _key(browser, "+")
    assert browser.execute_script("return getComputedStyle(document.querySelector('img.heat')).opacity") == "0.3"
    assert browser.find_element("id", "opacity").get_attribute("value") == "30"

    # At 50 % the layers look like the overlay the run blended at alpha 0.5 (render.overlay), not like the photo.
    browser.execute_script("arguments[0].value = 50; arguments[0].dispatchEvent(new Event('input'))", slider)
    _all_images_loaded(browser)
    first = next(r for r in records if r["kind"] == "heatmap" and r["image"] == ranked[0])
    layers = browser.find_element("css selector", f"img.heat[src$='{first['file'].rsplit('/', 1)[1]}']")
    layers = layers.find_element("xpath", "..")
    import io

    seen = np.asarray(Image.open(io.BytesIO(layers.screenshot_as_png)).convert("RGB"), np.float32)
    size = (seen.shape[1], seen.shape[0])

    def scaled(path):
        with Image.open(path) as picture:
            return np.asarray(picture.convert("RGB").resize(size, Image.Resampling.BILINEAR), np.float32)

    blended = scaled(batch_run / first["file"].replace("-heatmap.png", "-overlay.png"))
    photo = scaled(batch_run / first["photo"])
    assert np.abs(seen - blended).mean() < 6 < np.abs(seen - photo).mean()

    # Filters: by image name and by class, each checked against the manifest.
    _type(browser, "image-filter", "sub")
    assert [c["image"] for c in _cards(browser)] == [i for i in ranked if "sub" in i.lower()]
    _type(browser, "image-filter", "")
    name = records[-1]["class_name"]
    _type(browser, "class-filter", name)
    assert [c["image"] for c in _cards(browser)] == [
        i for i in ranked if any(r["image"] == i and r["class_name"] == name for r in records)
    ]
    _type(browser, "class-filter", "")

    # Keys: the selection walks the sorted images; Enter shows one image's methods side by side.
    browser.find_element("tag name", "h1").click()  # focus out of the boxes
    assert _selected(browser) is None
    _key(browser, "j")
    assert _selected(browser) == ranked[0]
    _key(browser, "j")
    _key(browser, "j")
    assert _selected(browser) == ranked[2]
    _key(browser, "k")
    assert _selected(browser) == ranked[1]
    from selenium.webdriver.common.keys import Keys

    _key(browser, Keys.ENTER)
    assert browser.find_element("id", "compare").is_displayed()
    heads = browser.execute_script(
        "return Array.from(document.querySelectorAll('#compare-head th')).map(t => t.firstChild.textContent)"
    )
    assert heads == ["Guided Backprop", "Grad-CAM"]
    compared = browser.execute_script(
        "return Array.from(document.querySelectorAll('#compare img.heat')).map(i => i.getAttribute('src'))"
    )
    assert sorted(map(urllib.parse.unquote, compared)) == sorted(
        r["file"] for r in records if r["image"] == ranked[1] and r["kind"] == "heatmap"
    )
    _key(browser, Keys.ARROW_RIGHT)  # next image, in the side-by-side view too
    assert _selected(browser) == ranked[2] and ranked[2] in browser.find_element("id", "compare-title").text
    _key(browser, Keys.ESCAPE)
    assert not browser.find_element("id", "compare").is_displayed()
    keys = browser.find_element("id", "keys").get_attribute("textContent")
    assert all(word in keys for word in ("next image", "side by side", "opacity", "next page"))


def test_sorting_by_a_metric_of_a_real_saliency_evaluate_run(browser, batch_run, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(batch_run, out)
    inputs = batch_run.parent / "in"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    names = sorted({r["image"] for r in _records(out)})
    done = subprocess.run(
        [sys.executable, "-m", "saliency_kit", "evaluate", *[str(inputs / n) for n in names], "--out", str(out),
         "--method", "guided_backprop", "--method", "gradcam", "--metric", "sparseness"],
        env=env, capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    value = {}
    for row in table["rows"]:
        for path, v in zip(table["images"], row["per_input"]):
            value[(os.path.relpath(path, inputs).replace(os.sep, "/"), row["method"])] = v
    assert row["metric"] == "sparseness" and row["higher_is_better"] is True
    _open(browser, out / "index.html")  # evaluate rebuilt the gallery
    _select(browser, "sort", "metric:0")
    both = sorted(names, key=lambda n: -max(value[(n, "guided_backprop")], value[(n, "gradcam")]))
    assert [c["image"] for c in _cards(browser)] == both
    # the metric's value of the methods shown: unticking Grad-CAM ranks by Guided Backprop alone
    browser.find_element("css selector", "#methods input[value='gradcam']").click()
    alone = sorted(names, key=lambda n: -value[(n, "guided_backprop")])
    assert [c["image"] for c in _cards(browser)] == alone
    assert both != alone or len(names) < 2  # the two orders differ on this run, so the check means something


def test_hostile_method_class_and_file_names_stay_text_in_every_view(browser, tmp_path):
    records = []
    for i, name in enumerate(HOSTILE):
        folder = f"{name} {i}".replace("/", "_")
        for j, method in enumerate(HOSTILE[:2]):
            for kind in ("heatmap", "overlay"):
                file = f"{folder}/m{j} {name}-{kind}.png".replace("\\", "_")
                _png(tmp_path / file, colour=(200, 40 * j, 40))
                line = _line(name + ".png", method, i, name, float(i + j), kind, file, 4)
                records.append({**line, "photo": f"{folder}/photo.png"})
        _png(tmp_path / folder / "photo.png", colour=(20, 200, 20))
    _write_manifest(tmp_path / "manifest.jsonl", records)
    (tmp_path / "metrics.json").write_text(
        json.dumps({"images": [f"/in/{n}.png" for n in HOSTILE], "rows": [
            {"method": HOSTILE[0], "metric": HOSTILE[1], "higher_is_better": True, "per_input": list(range(5))}]})
    )  # fmt: skip
    _open(browser, gallery.write_gallery(tmp_path))
    assert browser.execute_script("return window.hacked === undefined && document.scripts.length === 2")
    labels = browser.execute_script(
        "return Array.from(document.querySelectorAll('#methods label')).map(l => l.textContent)"
    )
    assert [label.strip() for label in labels] == HOSTILE[:2]
    sorts = browser.execute_script("return Array.from(document.getElementById('sort').options).map(o => o.text)")
    assert sorts[-1].startswith(HOSTILE[1] + ", best first")
    _select(browser, "sort", "metric:0")
    assert [c["title"] for c in _cards(browser)] == [n + ".png" for n in HOSTILE[::-1]]
    assert sorted(f for _, f in _panels(browser)) == sorted(r["file"] for r in records if r["kind"] == "heatmap")
    assert min(_all_images_loaded(browser)) > 0  # every hostile path reached its file
    browser.find_element("tag name", "h1").click()
    _key(browser, "j")
    _key(browser, "o")
    title = browser.find_element("id", "compare-title").text
    heads = browser.execute_script(
        "return Array.from(document.querySelectorAll('#compare-head th')).map(t => t.firstChild.textContent)"
    )
    assert title.startswith(HOSTILE[-1] + ".png") and heads == HOSTILE[:2]
    assert browser.execute_script("return document.querySelectorAll('#compare b, #compare script').length") == 2
    assert browser.execute_script("return window.hacked === undefined")


def test_10000_images_render_a_bounded_page_quickly(browser, tmp_path):
    """10,000 images x 2 methods: only a page of cards is in the document; load and filter are timed."""
    _png(tmp_path / "heat.png", colour=(250, 120, 20), size=(32, 32))
    _png(tmp_path / "photo-src.png", colour=(30, 30, 200), size=(32, 32))
    records, scores = [], {}
    rng = np.random.default_rng(1)
    for i in range(10_000):
        image, folder = f"set{i % 10}/img{i:05d}.png", f"set{i % 10}/img{i:05d}"
        (tmp_path / folder).mkdir(parents=True)
        os.link(tmp_path / "photo-src.png", tmp_path / folder / "photo.png")
        for method in ("gradient", "gradcam"):
            file = f"{folder}/{method}-c{i % 5}-k{i % 5}-heatmap.png"
            os.link(tmp_path / "heat.png", tmp_path / file)
            score = float(rng.normal())
            scores[image] = max(scores.get(image, -np.inf), score)
            records.append(
                {**_line(image, method, i % 5, f"k{i % 5}", score, "heatmap", file), "photo": f"{folder}/photo.png"}
            )
    _write_manifest(tmp_path / "manifest.jsonl", records)
    page = gallery.write_gallery(tmp_path, page_size=40)
    _open(browser, page)
    loaded = browser.execute_script(
        "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd - t.startTime"
    )
    ranked = sorted(scores, key=lambda i: -scores[i])
    assert [c["image"] for c in _cards(browser)] == ranked[:40]
    counts = browser.execute_script(
        "return [document.images.length, document.querySelectorAll('.card').length,"
        " Array.from(document.images).every(i => i.loading === 'lazy')]"
    )
    assert counts == [40 * 2 * 2, 40, True]  # 40 cards x 2 methods x (photo + heatmap), all lazy
    filtered = browser.execute_script(
        "const box = document.getElementById('image-filter'); const t0 = performance.now();"
        " box.value = 'img0999'; box.dispatchEvent(new Event('input')); return performance.now() - t0"
    )
    expected = [i for i in ranked if "img0999" in i]
    assert [c["image"] for c in _cards(browser)] == expected and len(expected) == 10
    classed = browser.execute_script(
        "const box = document.getElementById('image-filter'); box.value = ''; box.dispatchEvent(new Event('input'));"
        " const c = document.getElementById('class-filter'); const t0 = performance.now();"
        " c.value = 'k3'; c.dispatchEvent(new Event('input')); return performance.now() - t0"
    )
    assert browser.find_element("id", "page-info").text == "page 1 of 50"  # 2,000 images of class k3
    _select(browser, "page-size", "200")
    assert browser.execute_script("return document.images.length") == 200 * 2 * 2
    size = page.stat().st_size
    print(f"\n10,000 images: page {size / 1e6:.1f} MB, load {loaded:.0f} ms, name filter {filtered:.0f} ms,"
          f" class filter {classed:.0f} ms")  # fmt: skip
    assert loaded < 15_000 and filtered < 2_000 and classed < 2_000


def test_a_run_written_before_photos_resumes_and_keeps_its_blended_overlays(browser, batch_run, tmp_path):
    """An output folder from before the photos (no photo.png, no "photo" on its lines), resumed with
    one more image: nothing done is redone, the new image gets its photo, and the page lays maps
    over photos where there is one and shows the blended overlays elsewhere."""
    out = tmp_path / "out"
    shutil.copytree(batch_run, out)
    shutil.copytree(batch_run.parent / "in", tmp_path / "in")
    old = _records(out)
    for photo in {r["photo"] for r in old}:
        (out / photo).unlink()
    _write_manifest(out / "manifest.jsonl", [{k: v for k, v in r.items() if k != "photo"} for r in old])
    before = {r["file"]: (out / r["file"]).stat().st_mtime_ns for r in old}
    _png(tmp_path / "in" / "late arrival.png", colour=(240, 240, 30), size=(64, 64))
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(
        [sys.executable, "-m", "saliency_kit", "batch", str(tmp_path / "in"), "--out", str(out), "--method",
         "guided_backprop", "--method", "gradcam", "--target", "top2", "--resume"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "4 already complete" in done.stdout + done.stderr
    assert {f: (out / f).stat().st_mtime_ns for f in before} == before  # nothing redone
    after = _records(out)
    new = [r for r in after if r["image"] == "late arrival.png"]
    photo = new[0]["file"].rsplit("/", 1)[0] + "/photo.png"
    assert len(new) == 8 and all(r["photo"] == photo for r in new) and (out / photo).is_file()
    assert not any("photo" in r for r in after if r["image"] != "late arrival.png")
    _open(browser, out / "index.html")
    shown = browser.execute_script(
        "return Object.fromEntries(Array.from(document.querySelectorAll('.card')).map(c => [c.dataset.image,"
        " Array.from(c.querySelectorAll('img')).map(i => i.className + ' ' + i.getAttribute('src'))]))"
    )
    assert sorted(shown) == sorted({r["image"] for r in after})
    for image, sources in shown.items():
        if image == "late arrival.png":
            assert sorted(sources) == sorted(
                [f"photo {urllib.parse.quote(photo)}"] * 4
                + [f"heat {urllib.parse.quote(r['file'])}" for r in new if r["kind"] == "heatmap"]
            )
        else:
            overlays = [r["file"] for r in after if r["image"] == image and r["kind"] == "overlay"]
            assert sorted(sources) == sorted(" " + urllib.parse.quote(f) for f in overlays)
    assert min(_all_images_loaded(browser)) > 0
