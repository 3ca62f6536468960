"""Display in a real Jupyter kernel (nbclient + ipykernel): an Explanation as the last expression of a
cell shows its grid, and sk.render.show draws it inline exactly once; an explanation of two inputs
shows both (HTML, with a PNG beside it), and one of token ids its token spans (HTML only)."""

import base64
import io
import os
import pathlib

import numpy as np
import pytest
from PIL import Image

ROOT = pathlib.Path(__file__).resolve().parents[1]

SETUP = """
import numpy as np
import saliency_kit as sk
from saliency_kit.explanation import Explanation
maps = np.random.default_rng(0).random((2, 2, 12, 18)).astype("float32")
expl = Explanation(attributions=maps, maps=maps, targets=np.array([[0, 1], [1, 0]]),
                   scores=np.ones((2, 2), "float32"), method="gradcam")
photos = np.random.default_rng(1).integers(0, 256, (2, 24, 36, 3), dtype=np.uint8)
meta = np.random.default_rng(2).normal(size=(2, 2, 5)).astype("float32")
two = Explanation(attributions=[maps, meta], maps=[maps, np.abs(meta).max(-1)], targets=expl.targets,
                  scores=expl.scores, method="gradient", parts={"image": "input", "meta": "input"})
ids = Explanation(attributions=maps[:, :, 0, :, None], maps=maps[:, :, 0], targets=expl.targets,
                  scores=expl.scores, method="gradient", parts={"token_ids": "embedding"})
"""


def _pngs(cell) -> list[Image.Image]:
    found = []
    for output in cell.outputs:
        data = output.get("data", {})
        if "image/png" in data:
            found.append(Image.open(io.BytesIO(base64.b64decode(data["image/png"]))))
    return found


def test_explanations_and_show_draw_in_a_real_kernel(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="notebook display tests need nbformat (pip install -e '.[test]')")
    nbclient = pytest.importorskip("nbclient", reason="notebook display tests need nbclient (pip install -e '.[test]')")
    pytest.importorskip("ipykernel", reason="notebook display tests need ipykernel (pip install -e '.[test]')")
    cells = [
        SETUP,
        "expl",
        "expl.with_originals(photos, ['cat', 'dog'])",
        "sk.render.show(expl, photos, ['cat', 'dog'])",
        "two",
        "ids",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute(env=dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="module://matplotlib_inline.backend_inline"))
    assert not [o for cell in notebook.cells for o in cell.outputs if o["output_type"] == "error"]
    bare, with_photos, shown = (_pngs(cell) for cell in notebook.cells[1:4])
    assert len(bare) == 1 and len(with_photos) == 1 and len(shown) == 1  # each drawn once
    assert all(p.format == "PNG" for p in (*bare, *with_photos, *shown))
    assert with_photos[0].size[0] > bare[0].size[0]  # the input column
    assert np.asarray(shown[0].convert("L")).std() > 10
    assert notebook.cells[3].outputs[0]["output_type"] == "display_data"  # show() returns None
    two, ids = (cell.outputs[0]["data"] for cell in notebook.cells[4:])
    assert two["text/html"].count('class="saliency-part"') == 2 and len(_pngs(notebook.cells[4])) == 1
    assert ids["text/html"].count('class="saliency-token"') == 2 * 18 and "image/png" not in ids
