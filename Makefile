# Two commands on a fresh clone; each sets itself up on first use.
#   make run    explain the example shapes with the shipped model (writes saliency_out/)
#   make test   lint (ruff), type-check (mypy) and run the test suite
#   make docs   build the documentation site into site/ (offline, strict: a warning fails it)
# The virtual environment (.venv) is created and the package installed into it the first time,
# and again whenever pyproject.toml changes. `make clean` removes it.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The framework of Keras' backend: JAX's CPU build when KERAS_BACKEND=jax, PyTorch's when
# KERAS_BACKEND=torch, else TensorFlow's. PyTorch's CPU build is on PyTorch's own index (PyPI's wheel
# carries CUDA), added for the `torch` extra (TORCH_INDEX= to leave it out); where that index cannot
# be reached pip goes on without it and takes PyPI's build, which also runs on a CPU.
EXTRA  := $(if $(filter jax,$(KERAS_BACKEND)),jax,$(if $(filter torch,$(KERAS_BACKEND)),torch,cpu))
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
INDEX  := $(if $(and $(TORCH_INDEX),$(filter torch,$(EXTRA))),--extra-index-url $(TORCH_INDEX))
READY  := $(VENV)/.installed-$(EXTRA)
TESTS_READY := $(VENV)/.installed-tests
DOCS_READY := $(VENV)/.installed-docs
IMAGES := $(filter-out %_mask.png,$(wildcard examples/shapes/*.png))

.PHONY: run test docs browser clean

run: $(READY)
	$(BIN)/saliency explain $(IMAGES)

docs: $(DOCS_READY)
	$(BIN)/mkdocs build --strict

# The linter, the formatter check and the type checker run first (seconds); then the suite on
# TensorFlow, then the tests of tests/backends again in a JAX process and in a PyTorch process (Keras
# fixes its backend when imported): the conformance table against TensorFlow's numbers and what holds
# on each backend alone.
test: $(TESTS_READY) browser
	$(BIN)/ruff check saliency_kit tests scripts
	$(BIN)/ruff format --check saliency_kit tests scripts
	$(BIN)/mypy
	KERAS_BACKEND=tensorflow $(BIN)/python -m pytest -q
	KERAS_BACKEND=jax $(BIN)/python -m pytest -q tests/backends
	KERAS_BACKEND=torch $(BIN)/python -m pytest -q tests/backends

# `make run` installs what the library needs; `make test` adds the test tools, the anchors the
# methods are checked against, JAX's and PyTorch's CPU builds (the other backends the tests run on),
# and Ray (with its state API, for the killed-actor test).
$(READY): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRA)]" $(INDEX)
	touch $(READY)

# KerasHub (its BERT: a multi-input model the methods are tested on) is installed without its
# dependencies: it requires tensorflow-text, which pulls in the full `tensorflow` wheel beside our
# tensorflow-cpu. `import keras_hub` needs only the ones listed (the rest are already installed;
# sentencepiece and tensorflow-text are imported only by the tokenizers that use them).
# Xplique (its task operators: the reference of the region and box scores; its RISE: a peer in the
# benchmarks) likewise: it requires tensorflow[and-cuda]<=2.20. `import xplique` needs only the ones
# listed beside it (TensorFlow Probability needs tf-keras at the version of our TensorFlow).
# Zennit (the LRP peer of the benchmarks, on a PyTorch twin) goes apart, into $(VENV)/peers, which
# scripts/bench_peers.py puts on the path: in site-packages Quantus would import it, and with it
# torchvision, whose PyPI wheel does not load beside the CPU build of PyTorch.
$(TESTS_READY): $(READY)
	$(BIN)/python -m pip install --quiet -e ".[cpu,test,ray,docs]" "ray[default]"
	$(BIN)/python -m pip install --quiet --no-deps keras-hub==0.32.0 tokenizers==0.23.3 regex rich kagglehub==1.0.2 kagglesdk==0.1.28
	$(BIN)/python -m pip install --quiet --no-deps xplique==2.0.2 tensorflow-probability==0.25.0 tf-keras==2.21.0 einops==0.8.2 decorator==5.3.1 dm-tree==0.1.10
	$(BIN)/python -m pip install --quiet --no-deps --target $(VENV)/peers zennit==0.5.1
	touch $(TESTS_READY)

$(DOCS_READY): $(READY)
	$(BIN)/python -m pip install --quiet -e ".[cpu,docs]"
	touch $(DOCS_READY)

# The gallery's test drives a real headless Chromium. Installed from the system packages when
# missing and we are root (as in CI); otherwise that one test says why it is skipped.
browser:
	@if { command -v chromium || command -v chromium-browser; } >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else echo "note: no chromium here (and not root): the gallery's browser test will be skipped"; fi

clean:
	rm -rf $(VENV)
