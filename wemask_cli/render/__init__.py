"""Layer 6, the edge (ranks: tests/test_layers.py).

Terminal output (rich tables, progress) and files for people (PNG); only the CLI layer imports this package.

common: consoles, the progress reporter, JSON, figures, number formats; one module per command's output.
"""
