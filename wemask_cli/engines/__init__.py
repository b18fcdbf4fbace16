"""Layer 3, engines (ranks: tests/test_layers.py).

Engines: where a forward runs, behind one protocol (base.py: `Engine`, found through the `ENGINES` registry,
entry-point group `wemask.engines`). transformers (transformers.py) runs WeMask as hooks (wemask_cli.method.wemask_hook);
vLLM (vllm/) runs the same mask as a tensor operation on `positions == 0` (the only package that imports vllm).
Tasks and commands ask an engine; none names one."""
