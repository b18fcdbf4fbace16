"""Figures fit for a paper draft: every PNG is drawn from real command output, then its layout is measured with
matplotlib's own window extents: no two pieces of text overlap, nothing leaves the figure, the model is named as
the user gave it, wide-ranging perplexities get a log axis and a single point a readable one."""

from __future__ import annotations

import itertools
import json

import matplotlib
import pytest
from conftest import run_main
from test_report import eval_document, write_training_run

matplotlib.use("Agg")
from matplotlib.backends.backend_agg import FigureCanvasAgg

from wemask_cli.render.curve import curve_figure
from wemask_cli.render.locate import locate_figure
from wemask_cli.render.report import report_figure

EMBEDDED_CACHE = "/root/.cache/wemask/models/SmolLM2-135M-Instruct.Q4_1-ab5632ff1665"


def shown_texts(fig) -> list[tuple[str, object]]:
    """(text, window extent) of every piece of text drawn: figure titles and legends, and per visible axes its
    title, axis labels, tick labels inside the view, and legend entries."""
    if fig.canvas is None or not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for t in (fig._suptitle,) if t is not None]
    texts += [t for legend in fig.legends for t in legend.get_texts()]
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label]
        for axis, (low, high) in ((ax.xaxis, sorted(ax.get_xlim())), (ax.yaxis, sorted(ax.get_ylim()))):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if tick.label1.get_visible() and low <= tick.get_loc() <= high:
                    texts.append(tick.label1)
                if tick.label2.get_visible() and low <= tick.get_loc() <= high:
                    texts.append(tick.label2)
        if ax.get_legend() is not None:
            texts += ax.get_legend().get_texts()
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_visible() and t.get_text().strip()]


def assert_clean_layout(fig) -> None:
    boxes = shown_texts(fig)
    frame = fig.bbox
    for text, box in boxes:
        assert box.x0 >= frame.x0 - 1 and box.x1 <= frame.x1 + 1 and box.y0 >= frame.y0 - 1 and box.y1 <= frame.y1 + 1, f"{text!r} leaves the figure"
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        overlap = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0), min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
        assert min(overlap) <= 1, f"{a!r} overlaps {b!r}"


def test_the_layout_check_sees_an_overlap():
    """The check itself: a suptitle drawn over a panel title (report.png's old tight_layout) is caught."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_title("panel title")
    fig.tight_layout()
    fig.canvas.draw()
    box = ax.title.get_window_extent().transformed(fig.transFigure.inverted())
    fig.suptitle("a suptitle on top of the panel title", y=box.y1)  # where the panel title is
    with pytest.raises(AssertionError, match="overlaps"):
        assert_clean_layout(fig)
    plt.close(fig)


def test_report_figure_layout_log_axis_and_single_points(tmp_path):
    runs = tmp_path / "runs"
    write_training_run(runs / "dpo-a", stage="dpo", ref_mask="same", seed=0, loss=0.60)
    write_training_run(runs / "dpo-b", stage="dpo", ref_mask="same", seed=1, loss=0.64)
    write_training_run(runs / "dpo-lora", stage="dpo", ref_mask="none", peft=True, loss=0.4)
    write_training_run(runs / "sft-r0", mask_rate=0.0, loss=2.4)
    write_training_run(runs / "sft-r0.3", mask_rate=0.3, loss=2.3)
    (runs / "ppl").mkdir()
    (runs / "ppl" / "metrics.json").write_text(json.dumps(eval_document(rates=(0.0, 0.3, 1.0), values=[22.7, 23.1, 900.0])))
    from wemask_cli.commands.report import gather

    fig = report_figure(gather(sorted(runs.iterdir())))
    assert_clean_layout(fig)
    axes = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
    assert axes["eval perplexity: perplexity"].get_yscale() == "log"  # 22.7 to 900: more than 10x
    single = axes["dpo: train_loss"]  # one point per setting: marker, error bar, an axis wider than the bar
    low, high = single.get_ylim()
    assert high - low >= 0.1 * 0.62 and low < 0.62 - 0.028 and high > 0.62 + 0.028
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert "aware" in labels  # the sft curve through its plain r=0 run and r=0.3
    assert "aware r=0.3, LoRA r=16, ref-mask none" in labels and "aware r=0.3, full, ref-mask same" in labels


def test_curve_figure_from_a_real_eval(monkeypatch, capsys, tiny_model_dir, tmp_path):
    out = tmp_path / "eval"
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "perplexity", "--window", "16",
                            "--limit", "3", "--mask-rates", "0,0.5,1", "--me-layer", "1", "--output", str(out))  # fmt: skip
    assert code == 0, err
    assert (out / "curve.png").read_bytes()[:4] == b"\x89PNG"
    document = json.loads((out / "metrics.json").read_text())
    fig = curve_figure(document)
    assert_clean_layout(fig)
    _, change = fig.axes
    assert change.get_title() == "change from r = 0, paired"
    bars = [c for c in change.containers if hasattr(c, "has_yerr") and c.has_yerr]
    assert bars, "the change panel shows the paired standard error as error bars"


def test_curve_figure_names_the_embedded_model_and_shows_one_point():
    document = eval_document(task="choice", rates=(0.0,), values=[0.41])
    document.update(model=EMBEDDED_CACHE, primary_metric="accuracy", data="/x/choice.jsonl", seeds={"count": 1}, unit="examples",
                    axes=["mask_rate"], summary=[{"mask_rate": 0.0, "mode": "none", "metric": "accuracy", "mean": 0.41, "std": 0.0,
                                                  "se": 0.06, "seeds": 1, "n": 60}])  # fmt: skip
    fig = curve_figure(document)
    assert_clean_layout(fig)
    assert fig._suptitle.get_text() == "choice: SmolLM2-135M-Instruct (embedded, dequantized Q4_1 GGUF) on choice.jsonl"
    (ax,) = fig.axes
    low, high = ax.get_ylim()
    assert low < 41 - 6 and high > 41 + 6  # the error bar (± 1 s.e. in points) is inside the axis


def located(model_dir: str) -> dict:
    from wemask_cli.commands.locate_report import run_locate
    from wemask_cli.models.loading import load_model

    return run_locate(load_model(model_dir), ["The quick brown fox jumps.", "def f(x):\n    return x", "1 + 1 = 2"], max_length=16)


def legend_labels(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()] if ax.get_legend() else []


def test_locate_figure_layout_and_title(tiny_model_dir):
    """A dense model: seven panels (the ΔKL right axis beside them), no empty MoE panel, no expert legend entries."""
    report = located(tiny_model_dir)
    report["model"] = EMBEDDED_CACHE  # as load_model names the embedded model: its cache folder
    fig = locate_figure(report)
    assert_clean_layout(fig)
    assert fig._suptitle.get_text().startswith("SmolLM2-135M-Instruct (embedded, dequantized Q4_1 GGUF) (")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 8 and not any("MoE" in ax.get_title() for ax in shown)  # 7 panels and the ΔKL axis
    labels = [label for ax in shown for label in legend_labels(ax)]
    assert "attention" in labels and "routed experts" not in labels and "shared expert" not in labels
    assert [ax.get_xlabel() for ax in shown if ax.get_xlabel()] == ["layer (0-based)"] * 2  # the bottom of each column


def test_locate_figure_of_a_moe_model_has_its_routing_panel(tmp_path, tiny_tokenizer):
    from conftest import make_tiny_model

    model = make_tiny_model("qwen2_moe", vocab_size=len(tiny_tokenizer))
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    fig = locate_figure(located(str(tmp_path)))
    assert_clean_layout(fig)
    (routing,) = [ax for ax in fig.axes if ax.get_visible() and "MoE" in ax.get_title()]
    assert legend_labels(routing) == ["most common expert set", "most common expert"]
    who = next(ax for ax in fig.axes if ax.get_title().startswith("Who writes"))
    assert {"routed experts", "shared expert"} <= set(legend_labels(who))


def sweep_rows(tmp_path, rates=(0.0, 0.1, 0.3)) -> list[dict]:
    from wemask_cli.commands.report import gather

    runs = tmp_path / "sweep"
    for rate in rates:
        write_training_run(runs / f"r{rate:g}", mask_rate=rate, loss=2.4 - rate)
    return gather(sorted(runs.iterdir()))


def test_report_figure_x_axis_spans_the_rates_of_the_sweep(tmp_path):
    """A sweep that stops at 0.3 fills its panels (was 0 to 1 whatever the rates: 70% of each panel empty)."""
    fig = report_figure(sweep_rows(tmp_path))
    assert_clean_layout(fig)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["sft: train_loss", "sft: final_loss"]
    for ax in shown:
        low, high = ax.get_xlim()
        assert -0.05 < low < 0 and 0.3 < high < 0.35
        assert list(ax.get_xticks()) == [0.0, 0.1, 0.3]


def test_report_figure_leaves_single_point_panels_to_the_table(tmp_path):
    """The demo's report: 18 panels, most of one point (a DPO or GRPO run alone); those are named in the title, the
    panels with a curve or a comparison are drawn. A report of single points only still draws them."""
    from wemask_cli.commands.report import gather

    rows = sweep_rows(tmp_path)
    write_training_run(tmp_path / "dpo", stage="dpo", ref_mask="same")
    rows += gather([tmp_path / "dpo"])
    fig = report_figure(rows)
    assert_clean_layout(fig)
    assert [ax.get_title() for ax in fig.axes if ax.get_visible()] == ["sft: train_loss", "sft: final_loss"]
    assert fig._suptitle.get_text().splitlines()[1] == "3 metric(s) of a single point each (dpo 3): in the table, not drawn"
    alone = report_figure(gather([tmp_path / "dpo"]))
    assert len([ax for ax in alone.axes if ax.get_visible()]) == 3 and "\n" not in alone._suptitle.get_text()
    low, high = alone.axes[0].get_xlim()
    assert low < 0.3 < high and high - low < 0.5  # around its one rate


def test_curve_figure_x_axis_and_change_from_r0(monkeypatch, capsys, tiny_model_dir, tmp_path):
    """An eval sweep to 0.3: both panels span 0 to 0.3; the change panel starts at 0 on r = 0 (no change of r = 0
    from itself is recorded)."""
    out = tmp_path / "eval"
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "perplexity", "--window", "16",
                            "--limit", "2", "--mask-rates", "0,0.1,0.3", "--me-layer", "1", "--output", str(out))  # fmt: skip
    assert code == 0, err
    fig = curve_figure(json.loads((out / "metrics.json").read_text()))
    assert_clean_layout(fig)
    value, change = fig.axes
    for ax in (value, change):
        low, high = ax.get_xlim()
        assert -0.05 < low < 0 and 0.3 < high < 0.35 and list(ax.get_xticks()) == [0.0, 0.1, 0.3]
    (line,) = [c.lines[0] for c in change.containers]
    assert list(line.get_xdata()) == [0.0, 0.1, 0.3] and line.get_ydata()[0] == 0
    curves = [list(line.get_xdata()) for line in value.get_lines() if line.get_label().startswith("perplexity")]
    assert curves == [[0.0, 0.1, 0.3]]  # the plain r = 0 point is on the masked rates' line, not a line apart
