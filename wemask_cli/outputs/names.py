"""The names of the files a run writes that later commands read (`wemask report`, `--resume`, `--model DIR`). Torch-free."""

METRICS_FILE = "metrics.json"  # every run's flat summary (train/records.py, eval/document.py write it)
RUN_RECORD_FILE = "wemask_run.json"  # a training run's resolved settings, versions and seed (train/records.py)
MODEL_CONFIG_FILE = "config.json"  # a Hugging Face model folder (transformers' CONFIG_NAME)
ADAPTER_CONFIG_FILE = "adapter_config.json"  # a LoRA adapter's folder (peft's CONFIG_NAME), named without importing peft
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"  # its weights (peft's SAFETENSORS_WEIGHTS_NAME)
