"""svgplot.py — line and scatter charts as plain SVG text, standard library only, for the
reports that need a figure (the quality family's loss curves and accuracy-against-cost plots).

    panels = [Panel("add", series=[Series("s", [(1, 0.2), (2, 0.3)])], xlog=True)]
    write_svg("out.svg", "title", panels, columns=2)

Each panel has its own axes; a series is a polyline with a marker on every point (or markers
only with `line=False`). Colours come from one fixed palette, in series order, so a label keeps
its colour across panels when the panels list their series in the same order.
"""

import math
from dataclasses import dataclass, field
from html import escape

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#7f7f7f", "#17becf", "#bcbd22"]
W, H = 360, 250          # one panel
ML, MR, MT, MB = 52, 12, 28, 40  # its margins


@dataclass
class Series:
    label: str
    points: list
    line: bool = True
    dashed: bool = False


@dataclass
class Panel:
    title: str
    series: list = field(default_factory=list)
    xlabel: str = ""
    ylabel: str = ""
    xlog: bool = False
    ylog: bool = False
    ymin: float = None
    ymax: float = None


def _ticks(lo, hi, log):
    if log:
        a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        return [10.0 ** e for e in range(a, b + 1)]
    span = hi - lo or 1.0
    step = 10 ** math.floor(math.log10(span / 4))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= 6:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _fmt(v):
    if v != 0 and (abs(v) >= 1e4 or abs(v) < 1e-2):
        return f"{v:.0e}"
    return f"{v:g}"


def _range(values, log, lo=None, hi=None):
    vals = [v for v in values if not log or v > 0]
    a = min(vals) if lo is None else lo
    b = max(vals) if hi is None else hi
    if log:
        return 10 ** math.floor(math.log10(a)), 10 ** math.ceil(math.log10(b))
    if a == b:
        a, b = a - 1, b + 1
    return a, b


def _panel(p, ox, oy, colours):
    xs = [x for s in p.series for x, _ in s.points]
    ys = [y for s in p.series for _, y in s.points]
    if not xs:
        return [f'<text x="{ox + W / 2}" y="{oy + H / 2}" text-anchor="middle">no data</text>']
    x0, x1 = _range(xs, p.xlog)
    y0, y1 = _range(ys, p.ylog, p.ymin, p.ymax)

    def sx(x):
        t = (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) if p.xlog else (x - x0) / (x1 - x0)
        return ox + ML + t * (W - ML - MR)

    def sy(y):
        t = (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)) if p.ylog else (y - y0) / (y1 - y0)
        return oy + H - MB - t * (H - MT - MB)

    out = [f'<text x="{ox + ML}" y="{oy + 18}" font-weight="bold">{escape(p.title)}</text>',
           f'<rect x="{ox + ML}" y="{oy + MT}" width="{W - ML - MR}" height="{H - MT - MB}" fill="none" stroke="#999"/>']
    for t in _ticks(x0, x1, p.xlog):
        if x0 <= t <= x1:
            out.append(f'<line x1="{sx(t):.1f}" y1="{oy + H - MB}" x2="{sx(t):.1f}" y2="{oy + MT}" stroke="#eee"/>')
            out.append(f'<text x="{sx(t):.1f}" y="{oy + H - MB + 14}" text-anchor="middle" font-size="10">{_fmt(t)}</text>')
    for t in _ticks(y0, y1, p.ylog):
        if y0 <= t <= y1:
            out.append(f'<line x1="{ox + ML}" y1="{sy(t):.1f}" x2="{ox + W - MR}" y2="{sy(t):.1f}" stroke="#eee"/>')
            out.append(f'<text x="{ox + ML - 4}" y="{sy(t) + 3:.1f}" text-anchor="end" font-size="10">{_fmt(t)}</text>')
    out.append(f'<text x="{ox + (ML + W - MR) / 2}" y="{oy + H - 8}" text-anchor="middle" font-size="11">{escape(p.xlabel)}</text>')
    out.append(f'<text transform="translate({ox + 12},{oy + (MT + H - MB) / 2}) rotate(-90)" text-anchor="middle" font-size="11">{escape(p.ylabel)}</text>')
    for s in p.series:
        c = colours[s.label]
        pts = [(sx(x), sy(y)) for x, y in s.points if (not p.xlog or x > 0) and (not p.ylog or y > 0)]
        if s.line and len(pts) > 1:
            dash = ' stroke-dasharray="4,3"' if s.dashed else ""
            out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5"{dash} points="'
                       + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
        if not s.line or len(pts) <= 40:
            out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{c}"/>' for x, y in pts]
    return out


def write_svg(path, title, panels, columns=2):
    labels = []
    for p in panels:
        for s in p.series:
            if s.label not in labels:
                labels.append(s.label)
    colours = {l: PALETTE[i % len(PALETTE)] for i, l in enumerate(labels)}
    rows = math.ceil(len(panels) / columns)
    legend_h = 20 * math.ceil(len(labels) / 6)
    width, height = columns * W, 30 + rows * H + legend_h
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    for i, p in enumerate(panels):
        out += _panel(p, (i % columns) * W, 30 + (i // columns) * H, colours)
    for i, l in enumerate(labels):
        x, y = 10 + (i % 6) * (width - 20) / 6, 30 + rows * H + 14 + 20 * (i // 6)
        out.append(f'<rect x="{x:.0f}" y="{y - 9}" width="12" height="10" fill="{colours[l]}"/>')
        out.append(f'<text x="{x + 16:.0f}" y="{y}">{escape(l)}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
