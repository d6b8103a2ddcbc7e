"""Server-rendered SVG charts: no script, nothing from elsewhere, styled by static/style.css.

Pure functions from numbers to markup. Every text that goes in is escaped here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from html import escape

__all__ = ["Layer", "Line", "stacked_bars"]

WIDTH = 720
HEIGHT = 200
LEFT = 56  # room for the axis labels
BOTTOM = 22
TOP = 10


@dataclass(frozen=True, slots=True)
class Layer:
    """One series: a name for the tooltip, a CSS class for its colour, a value per day."""

    name: str
    css: str
    values: dict[date, float]


@dataclass(frozen=True, slots=True)
class Line:
    """A horizontal rule across the chart (a daily cap)."""

    label: str
    value: float
    css: str = "cap"


def stacked_bars(
    days: Sequence[date],
    layers: Sequence[Layer],
    lines: Sequence[Line] = (),
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
    title: str = "",
) -> str:
    """One bar (`<g class="bar">`) per day, its layers stacked bottom-up in order, each bar
    with a tooltip listing the non-zero layers; `lines` drawn across with their labels."""
    totals = [sum(layer.values.get(d, 0.0) for layer in layers) for d in days]
    peak = max([*totals, *(ln.value for ln in lines), 0.0])
    top = peak * 1.1 if peak > 0 else 1.0  # headroom above the tallest bar or cap
    plot_w = WIDTH - LEFT - 4
    plot_h = HEIGHT - TOP - BOTTOM
    step = plot_w / max(len(days), 1)
    bar_w = max(step * 0.72, 1.0)

    def y(value: float) -> float:
        return TOP + plot_h - plot_h * value / top

    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<line class="axis" x1="{LEFT}" y1="{y(0):.1f}" x2="{WIDTH - 4}" y2="{y(0):.1f}"/>',
        f'<text class="tick" x="{LEFT - 6}" y="{y(0):.1f}" text-anchor="end">{escape(fmt(0))}'
        "</text>",
    ]
    if peak > 0:
        out.append(
            f'<text class="tick" x="{LEFT - 6}" y="{y(peak) + 4:.1f}" text-anchor="end">'
            f"{escape(fmt(peak))}</text>"
        )
    for i, (day, total) in enumerate(zip(days, totals, strict=True)):
        x = LEFT + i * step + (step - bar_w) / 2
        parts = [f"{day.isoformat()}: {fmt(total)}"]
        parts += [
            f"{layer.name} {fmt(layer.values[day])}"
            for layer in layers
            if layer.values.get(day, 0.0) > 0
        ]
        out.append(
            f'<g class="bar" data-day="{day.isoformat()}" data-total="{total:.6g}">'
            f"<title>{escape(' · '.join(parts))}</title>"
        )
        base = 0.0
        for layer in layers:
            value = layer.values.get(day, 0.0)
            if value <= 0:
                continue
            y0, y1 = y(base), y(base + value)
            out.append(
                f'<rect class="seg {escape(layer.css)}" x="{x:.1f}" y="{y1:.1f}" '
                f'width="{bar_w:.1f}" height="{max(y0 - y1, 0.5):.1f}"/>'
            )
            base += value
        out.append("</g>")
        if (len(days) - 1 - i) % 7 == 0:  # every seventh day, counted back from the last
            last = i == len(days) - 1
            out.append(
                f'<text class="tick" x="{(x + bar_w) if last else (x + bar_w / 2):.1f}" '
                f'y="{HEIGHT - 6}" text-anchor="{"end" if last else "middle"}">'
                f"{day.strftime('%d %b')}</text>"
            )
    for ln in lines:
        ly = y(ln.value)
        out.append(
            f'<g class="{escape(ln.css)}"><line x1="{LEFT}" y1="{ly:.1f}" x2="{WIDTH - 4}" '
            f'y2="{ly:.1f}"/><text x="{WIDTH - 6}" y="{ly - 3:.1f}" text-anchor="end">'
            f"{escape(ln.label)} {escape(fmt(ln.value))}</text></g>"
        )
    out.append("</svg>")
    return "".join(out)
