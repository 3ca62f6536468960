"""A notebook on Keras' JAX and PyTorch backends (a real Jupyter kernel: nbclient + ipykernel): the
kernel runs on the process's backend, ``sk.explain`` gives a linear model's closed-form gradient,
an Explanation as a cell's last expression draws its grid once, and ``sk.render.show`` draws it
inline once."""

import keras
import pytest

BACKEND = keras.backend.backend()
pytestmark = pytest.mark.skipif(
    BACKEND == "tensorflow",
    reason="runs in the JAX and PyTorch processes: KERAS_BACKEND=jax (or torch) pytest tests/backends",
)

import base64  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]

SETUP = """
import json
import keras
import numpy as np
import saliency_kit as sk
kernel = np.random.default_rng(0).normal(size=(6 * 5 * 3, 4)).astype("float32")
model = keras.Sequential([keras.Input((6, 5, 3)), keras.layers.Flatten(), keras.layers.Dense(4)])
model.layers[-1].set_weights([kernel, np.zeros(4, "float32")])
x = np.random.default_rng(1).uniform(size=(2, 6, 5, 3)).astype("float32")
expl = sk.explain(model, x, method="gradient", targets=[[1, 3], [2, 0]])
"""


def _pngs(cell) -> list:
    return [
        Image.open(io.BytesIO(base64.b64decode(o["data"]["image/png"])))
        for o in cell.outputs
        if "image/png" in o.get("data", {})
    ]


def test_a_jupyter_kernel_on_the_backend_explains_and_draws(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="notebook tests need nbformat (pip install -e '.[test]')")
    nbclient = pytest.importorskip("nbclient", reason="notebook tests need nbclient (pip install -e '.[test]')")
    pytest.importorskip("ipykernel", reason="notebook tests need ipykernel (pip install -e '.[test]')")
    cells = [
        SETUP,
        "print(json.dumps({'backend': sk.backend(), 'keras': keras.backend.backend(), 'recorded': expl.backend, "
        "'maps': expl.maps.tolist(), 'kernel': kernel.tolist()}))",
        "expl",
        "sk.render.show(expl, (x * 255).astype('uint8'), ['a', 'b', 'c', 'd'])",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    env = dict(os.environ, KERAS_BACKEND=BACKEND, PYTHONPATH=str(ROOT))
    client.execute(env=dict(env, MPLBACKEND="module://matplotlib_inline.backend_inline"))
    assert not [o for cell in notebook.cells for o in cell.outputs if o["output_type"] == "error"]

    facts = json.loads(notebook.cells[1].outputs[0]["text"])
    assert (facts["backend"], facts["keras"], facts["recorded"]) == (BACKEND, BACKEND, BACKEND)
    # The gradient of logit k is kernel[:, k] reshaped; its map is the largest |.| over channels.
    kernel = np.asarray(facts["kernel"], np.float32).reshape(6, 5, 3, 4)
    expected = [[np.abs(kernel[..., k]).max(-1) for k in row] for row in ([1, 3], [2, 0])]
    np.testing.assert_allclose(np.asarray(facts["maps"]), expected, rtol=1e-6)

    shown, drawn = _pngs(notebook.cells[2]), _pngs(notebook.cells[3])
    assert len(shown) == 1 and len(drawn) == 1  # each drawn once
    assert np.asarray(drawn[0].convert("L")).std() > 10
    assert drawn[0].size[0] > shown[0].size[0]  # the input column
