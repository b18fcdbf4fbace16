"""Layers -1 to 1, runtime plumbing (ranks: tests/test_layers.py).

What every other layer may import, with no knowledge of models or data.

- errors.py      WeMaskError, the user-facing error family (the CLI prints one line, exit 2)
- atomic.py      the one atomic file write
- versions.py    installed library versions (run records, compat's errors, `wemask env`)
- tested.py      libraries at untested versions: the warning line, and the line of a failure inside one
- progress.py    status lines and progress without rich (the CLI installs a rich reporter)
- ranks.py       launcher processes: the one rank-0 rule, barriers, one answer for all
- finite.py      NaN/inf refused in every tensor wemask loads
- hub.py         the Hugging Face Hub reached or not, checked once
- cache_dir.py   wemask's own cache folder
- plugins.py     entry points loaded once, a failing plugin left out with one warning
- registry.py    the one Registry every extension point uses (tasks, interventions, stages, schemes, engines, layouts)

Layers, lowest first: runtime/ and compat/ -> method/ -> models/, mask_request/, prompts/, data/, interventions/,
rewards/, outputs/ -> engines/ -> eval/, train/ -> commands/ -> cli/, render/ (tests/test_layers.py holds the ranks).
Imports nothing heavy.
"""
