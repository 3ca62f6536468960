"""``saliency explain-text``, run for real on a KerasHub preset directory and a ``.keras`` file
saved from a tiny GPT-2: the generated text and every file written printed, one-line errors."""

import pytest
from causal_lm_support import tiny_gpt2
from cli_support import decodes, own_lines, run

import saliency_kit as sk
from saliency_kit.batch import gallery


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    lm = tiny_gpt2(seed=7)
    lm.save_to_preset(str(folder / "preset"))
    lm.save(str(folder / "lm.keras"))
    expected = sk.explain_generation(lm, "ab a c b", max_new_tokens=4, method="gradient")
    return folder, "".join(expected.tokens[0][expected.options["start"] :])


@pytest.mark.parametrize("where", ["preset", "lm.keras"])
def test_explain_text_writes_the_matrix_and_prints_the_text(saved, where):
    folder, text = saved
    out = folder / f"out_{where}"
    args = ["explain-text", "--model", folder / where, "--prompt", "ab a c b", "--max-new-tokens", "4"]
    status, stdout, stderr = run(*args, "--method", "gradient", "--merge", "words", "--out", out)
    assert status == 0, stderr
    lines = stdout.splitlines()
    assert f"generated: {text!r}" in lines
    assert f"wrote {out / 'generation.html'}" in lines and f"wrote {out / 'generation.png'}" in lines
    assert decodes(out / "generation.png")[0] > 100
    assert "<table" in (out / "generation.html").read_text()
    # the gallery of --out shows the prompt's card: its matrix, read back from the manifest
    assert f"wrote {out / 'index.html'}" in lines
    (card,) = gallery.gallery_data(out)["images"]
    (shown,) = card["outputs"]
    assert card["image"] == "ab a c b" and shown["class_name"] == text and shown["method"] == "gradient"
    assert f"wrote {out / shown['generation']}" in lines
    assert "".join(shown["text"]["rows"]) == text and "".join(shown["text"]["columns"]).endswith("ab a c b" + text)


def test_a_missing_model_and_an_unknown_method_are_one_line_errors(saved, tmp_path):
    folder, _ = saved
    status, _, stderr = run("explain-text", "--model", tmp_path / "nothing.keras", "--prompt", "a")
    assert status == 2 and own_lines(stderr, "explain-text") == [
        f"saliency explain-text: error: no such file: {tmp_path / 'nothing.keras'}"
    ]
    status, _, stderr = run("explain-text", "--model", folder / "preset", "--prompt", "a", "--method", "gradeint")
    assert status == 2
    assert own_lines(stderr, "explain-text") == [
        "saliency explain-text: error: unknown method 'gradeint' (did you mean 'gradient'?)"
    ]
