"""Shared test settings: quiet TensorFlow, deterministic seeds, CPU only.

This folder has no ``__init__.py``: pytest puts it on ``sys.path``, so a helper is imported by its
path under ``tests/`` (``from cli_support import …``, ``from propagation.numpy_reference import …``),
and no two test files may share a name (``tests/test_repository.py`` checks it)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    import keras

    if keras.backend.backend() == "tensorflow":
        keras.utils.set_random_seed(1234)
    else:  # the same seeds without TensorFlow, which keras.utils.set_random_seed imports if installed
        import random

        import numpy as np
        from keras.src.backend.common import global_state

        global_state.set_global_attribute("global_random_seed", 1234)
        global_state.set_global_attribute("global_seed_generator", None)  # recreated from the seed
        random.seed(1234)
        np.random.seed(1234)
    yield


def pytest_runtest_setup(item):
    """A test marked ``channels_first_convolution`` is skipped where the backend cannot run one."""
    if item.get_closest_marker("channels_first_convolution") is not None:
        from cpu_support import CHANNELS_FIRST_REASON, channels_first_convolutions_run

        if not channels_first_convolutions_run():
            pytest.skip(CHANNELS_FIRST_REASON)
