"""`wemask eval`: the results table and the curve (progress goes through wemask_cli.runtime.progress)."""

from __future__ import annotations

from rich.table import Table

from wemask_cli.render.common import format_metric, is_percent

FIXED = ("mask_rate", "mode", "me_layer")


def spread(metric: str, value) -> str:
    """A standard error or std: 'n/a' when there is none (one unit)."""
    if value is None:
        return "n/a"
    return f"{100 * value:.1f}" if is_percent(metric) else f"{value:.2g}"


def delta_cell(primary: str, delta, se) -> str:
    """A paired change and its standard error; blank where there is none (the reference itself, r = 0)."""
    if delta is None:
        return ""
    if is_percent(primary):
        return f"{100 * delta:+.1f} ± {'n/a' if se is None else f'{100 * se:.1f}'} pt"
    return f"{delta:+.4g} ± {'n/a' if se is None else f'{se:.2g}'}"


def eval_tables(document: dict, width: int = 80) -> list[Table]:
    """The results as tables that fit `width` columns with no header cut: the primary metric with n and its paired
    changes first; the other metrics beside it when they fit, else in further tables of the same rows."""
    metrics = list(dict.fromkeys(row["metric"] for row in document["summary"]))
    primary = document.get("primary_metric") or (metrics[0] if metrics else None)
    whole = eval_table(document)
    if _fits(whole, width) or len(metrics) < 2:
        return [whole]
    tables, rest = [eval_table(document, [primary])], [m for m in metrics if m != primary]
    while rest:
        take = len(rest)
        while take > 1 and not _fits(eval_table(document, rest[:take], secondary=True, title=""), width):
            take -= 1
        title = f"wemask eval: {document['task']}: other metrics (same rows)"
        tables.append(eval_table(document, rest[:take], secondary=True, title=title))
        rest = rest[take:]
    return tables


def _fits(table: Table, width: int) -> bool:
    """Whether rich renders `table` in `width` columns without cutting a word ('…') or squeezing a column out (a
    header word missing)."""
    import io

    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(table)
    text = console.export_text()
    return "…" not in text and all(word in text for column in table.columns for word in str(column.header).split())


def eval_table(document: dict, metrics: list[str] | None = None, *, secondary: bool = False, title: str | None = None) -> Table:
    """One row per variant (mask rate, mode, other axes in one column): each metric as value ± spread, n, and the
    primary metric's paired changes (from r = 0, and from each other axis's reference); a `secondary` table (more
    metrics of the same rows) has only the metrics."""
    summary = document["summary"]
    metrics = metrics or list(dict.fromkeys(row["metric"] for row in summary))
    primary = document.get("primary_metric") or metrics[0]
    seeds = document.get("seeds", {}).get("count", 1)
    unit = document.get("unit", "examples")
    what = f"std across {seeds} seeds" if seeds > 1 else f"standard error over {unit}"
    extra = [axis for axis in document.get("axes", []) if axis not in FIXED]
    if title is None:
        title = f"wemask eval: {document['task']} ({document.get('n_examples', '?')} {unit}; ± is the {what})"
    table = Table(title=title or None)
    table.add_column("mask rate", justify="right")
    table.add_column("mode")
    if extra:
        table.add_column(" / ".join(extra))
    for metric in metrics:
        table.add_column(metric, justify="right")
    if not secondary:
        table.add_column("n", justify="right")
    labels = ["mask_rate", "mode", *extra]
    changes = sorted({k for r in summary if r["metric"] == primary for k in r if k.startswith("delta") and not k.endswith("_se")}) if not secondary else []
    for key in changes:
        against = "r=0" if key == "delta" else document.get("deltas", {}).get(key, key.removeprefix("delta_"))
        table.add_column(f"Δ {primary} vs {against} (paired)", justify="right")
    tested = "delta" in changes and any("p_value" in r for r in summary if r["metric"] == primary)
    if tested:
        table.add_column("95% CI, p (paired)", justify="right")
    cells = {tuple(r.get(k) for k in labels) + (r["metric"],): r for r in summary}
    for variant in dict.fromkeys(tuple(r.get(k) for k in labels) for r in summary):
        n = None if secondary else str(next(r["n"] for r in summary if tuple(r.get(k) for k in labels) == variant))
        row = variant_row(variant, cells, metrics, seeds, n, changes, primary)
        table.add_row(*row, *([significance_cell(primary, cells.get(variant + (primary,)) or {})] if tested else []))
    return table


def variant_row(variant: tuple, cells: dict, metrics: list[str], seeds: int, n: str | None, changes: list[str],
                primary: str) -> list[str]:
    """One variant's cells: its labels, each metric as value ± spread, n (unless None: a secondary table) and the
    primary metric's paired changes."""
    row = [f"{variant[0]:g}", str(variant[1])] + ([" / ".join(str(v) for v in variant[2:])] if len(variant) > 2 else [])
    for metric in metrics:
        cell = cells.get(variant + (metric,))
        error = None if cell is None else (cell["std"] if seeds > 1 else cell["se"])
        row.append("-" if cell is None else f"{format_metric(metric, cell['mean'])} ± {spread(metric, error)}")
    if n is not None:
        row.append(n)
    cell = cells.get(variant + (primary,)) or {}
    return row + [delta_cell(primary, cell.get(key), cell.get(f"{key}_se")) for key in changes]


def significance_cell(primary: str, cell: dict) -> str:
    """'[-0.8, +1.2] p=0.41': the paired bootstrap 95% interval of the change from r = 0 and its paired p-value;
    blank at r = 0 or where there is none (as the paired change is)."""
    if cell.get("p_value") is None:
        return ""
    shown = (lambda x: f"{100 * x:+.1f}") if is_percent(primary) else (lambda x: f"{x:+.3g}")
    interval = cell.get("paired_ci95")
    bounds = f"[{shown(interval[0])}, {shown(interval[1])}]" if interval else "CI n/a"
    p = cell["p_value"]
    return f"{bounds} {'p<0.001' if p < 0.001 else f'p={p:.2g}'}"
