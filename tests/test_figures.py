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


def test_locate_figure_layout_and_title(tiny_model_dir):
    from wemask_cli.commands.locate import run_locate
    from wemask_cli.models.loading import load_model

    loaded = load_model(tiny_model_dir)
    report = run_locate(loaded, ["The quick brown fox jumps.", "def f(x):\n    return x", "1 + 1 = 2"], max_length=16)
    report["model"] = EMBEDDED_CACHE  # as load_model names the embedded model: its cache folder
    fig = locate_figure(report)
    assert_clean_layout(fig)
    assert fig._suptitle.get_text().startswith("SmolLM2-135M-Instruct (embedded, dequantized Q4_1 GGUF) (")
