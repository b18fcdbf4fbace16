"""Causal probes of the ME layer (`wemask probe`): one module per probe, registered in `registry.PROBES`."""
