"""The report's plots: matplotlib figures rendered to inline SVG strings.

Every function returns one ``<svg>`` element (no XML prolog) that a page can inline, so a
report stays one file that works offline. Conventions that make plots readable at a glance:
labelled axes with units, pass rates in percent, a legend whenever colour carries meaning,
and the Okabe-Ito palette (distinguishable with the common colour-vision deficiencies). Text
stays text in the SVG (``svg.fonttype = none``) and ids are salted deterministically, so the
same data gives the same bytes.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import matplotlib as mpl
import numpy as np
import numpy.typing as npt
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
"""Okabe & Ito's colour-blind-safe palette (yellow last: weak on white)."""

OUTCOME_COLOURS = {
    "pass": "#009E73",
    "fail": "#D55E00",
    "error": "#E69F00",
    "timeout": "#CC79A7",
    "memory": "#56B4E9",
    "output_limit": "#0072B2",
    "killed": "#000000",
    "no_code": "#999999",
    "truncated": "#F0E442",
}
INFRA_COLOUR = "#BBBBBB"

_RC: Any = {  # Any: matplotlib types rc keys as a Literal union
    "svg.fonttype": "none",
    "svg.hashsalt": "codegym-report",
    "font.family": "sans-serif",
    "font.size": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.axisbelow": True,
}


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval, as plotted."""

    label: str
    mean: float
    low: float
    high: float


@contextmanager
def _figure(width: float, height: float) -> Iterator[Figure]:
    with mpl.rc_context(_RC):
        yield Figure(figsize=(width, height), layout="constrained")


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    # Inline SVG in HTML must not carry the XML prolog or DOCTYPE.
    text = text[text.index("<svg") :]
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def _colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def passk_curve(series: Sequence[tuple[str, Sequence[int], Sequence[Interval]]]) -> str:
    """pass@k against the sample budget k, one line (with CI band) per series."""
    with _figure(6.4, 3.4) as fig:
        ax = fig.add_subplot()
        all_k: set[int] = set()
        for i, (label, ks, ests) in enumerate(series):
            c = _colour(i)
            y = [e.mean for e in ests]
            ax.plot(ks, y, marker="o", color=c, label=label)
            ax.fill_between(ks, [e.low for e in ests], [e.high for e in ests], color=c, alpha=0.18)
            all_k.update(ks)
        if max(all_k, default=1) >= 10:
            ax.set_xscale("log")
        ax.set_xticks(sorted(all_k), [str(k) for k in sorted(all_k)])
        ax.minorticks_off()
        ax.set_xlabel("sample budget k (samples per task)")
        ax.set_ylabel("pass@k (shaded: 95% CI)")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(0, 1.02)
        ax.set_title("pass@k against sample budget")
        if len(series) > 1:
            fig.legend(loc="outside right upper", fontsize=8, frameon=False)
        return _svg(fig)


def outcome_bars(runs: Sequence[tuple[str, dict[str, int], frozenset[str]]]) -> str:
    """Share of samples per outcome, one stacked bar per run; infra outcomes grey, hatched."""
    with _figure(6.4, 1.3 + 0.45 * len(runs)) as fig:
        ax = fig.add_subplot()
        seen: dict[str, tuple[str, str]] = {}
        for y, (_, counts, infra) in enumerate(runs):
            total = sum(counts.values()) or 1
            left = 0.0
            model = [o for o in OUTCOME_COLOURS if o in counts]
            extra = sorted(o for o in counts if o not in OUTCOME_COLOURS and o not in infra)
            for o in [*model, *extra, *sorted(o for o in counts if o in infra)]:
                share = counts[o] / total
                colour = INFRA_COLOUR if o in infra else OUTCOME_COLOURS.get(o, "#666666")
                hatch = "//" if o in infra else ""
                ax.barh(
                    y,
                    share,
                    left=left,
                    color=colour,
                    hatch=hatch,
                    edgecolor="white",
                    height=0.6,
                    label=None if o in seen else o,
                )
                seen[o] = (colour, hatch)
                left += share
        ax.set_yticks(range(len(runs)), [r[0] for r in runs])
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.xaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_xlabel("share of samples (hatched grey: infra, excluded from statistics)")
        ax.grid(axis="y", visible=False)
        fig.legend(loc="outside lower center", ncol=min(7, len(seen)), fontsize=8, frameon=False)
        return _svg(fig)


def difference_plot(rows: Sequence[Interval], margin: float, mde: float | None) -> str:
    """Paired differences (candidate - baseline) with CIs against 0 and the margin."""
    with _figure(6.4, 1.8 + 0.45 * len(rows)) as fig:
        ax = fig.add_subplot()
        pts = 100.0
        lo = min([-margin * pts, *(r.low * pts for r in rows)], default=-1.0)
        hi = max([0.0, *(r.high * pts for r in rows)], default=1.0)
        pad = max(1.0, 0.15 * (hi - lo))
        ax.set_xlim(lo - pad, hi + pad)
        if mde is not None:
            ax.axvspan(
                -mde * pts,
                mde * pts,
                color="#999999",
                alpha=0.15,
                label=f"±MDE ({mde * pts:.1f} pts at 80% power)",
            )
        ax.axvspan(
            lo - pad,
            -margin * pts,
            color=OUTCOME_COLOURS["fail"],
            alpha=0.10,
            label="regressed zone",
        )
        ax.axvline(0, color="black", lw=1)
        ax.axvline(
            -margin * pts,
            color=OUTCOME_COLOURS["fail"],
            ls="--",
            lw=1.2,
            label=f"−margin ({margin * pts:.1f} pts)",
        )
        for y, r in enumerate(rows):
            c = PALETTE[0] if y == 0 else PALETTE[5]
            ax.errorbar(
                r.mean * pts,
                y,
                xerr=[[(r.mean - r.low) * pts], [(r.high - r.mean) * pts]],
                fmt="o",
                color=c,
                capsize=5,
                lw=2,
                ms=7,
            )
        ax.set_yticks(range(len(rows)), [r.label for r in rows])
        ax.set_ylim(len(rows) - 0.4, -0.6)
        ax.grid(axis="y", visible=False)
        ax.set_xlabel("candidate − baseline (percentage points; bars: 95% CI)")
        fig.legend(loc="outside lower center", ncol=3, fontsize=8, frameon=False)
        return _svg(fig)


def ab_scatter(baseline: npt.ArrayLike, candidate: npt.ArrayLike, names: tuple[str, str]) -> str:
    """Per-task pass rates, baseline (x) against candidate (y), jittered, with the diagonal."""
    a, b = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    rng = np.random.default_rng(0)  # fixed: the same runs give the same picture
    jit = 0.025
    better, worse = int((b > a).sum()), int((b < a).sum())
    same = len(a) - better - worse
    with _figure(4.6, 4.4) as fig:
        ax = fig.add_subplot()
        ax.plot([0, 1], [0, 1], color="black", lw=1, ls="--", zorder=1)
        groups = (
            (b > a, OUTCOME_COLOURS["pass"], f"candidate better ({better} tasks)"),
            (b < a, OUTCOME_COLOURS["fail"], f"candidate worse ({worse})"),
            (b == a, "#777777", f"equal ({same})"),
        )
        for mask, colour, label in groups:
            if not mask.any():
                continue
            m = int(mask.sum())
            ax.scatter(
                a[mask] + rng.uniform(-jit, jit, m),
                b[mask] + rng.uniform(-jit, jit, m),
                s=18,
                alpha=0.6,
                color=colour,
                label=label,
                edgecolors="none",
                zorder=2,
            )
        ax.set_xlim(-0.06, 1.06)
        ax.set_ylim(-0.06, 1.06)
        ax.set_aspect("equal")
        ax.xaxis.set_major_formatter(PercentFormatter(1.0))
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_xlabel(f"baseline pass rate per task ({names[0]})")
        ax.set_ylabel(f"candidate pass rate per task ({names[1]})")
        ax.set_title("per task: candidate vs baseline (jittered)")
        ax.legend(loc="best", fontsize=8, framealpha=0.9)
        return _svg(fig)


def quality_vs_cost(panels: Sequence[tuple[str, Sequence[tuple[Interval, float]]]]) -> str:
    """pass@1 (with CI bars) against a cost per sample, one panel per cost measure.

    ``panels`` holds (x-axis label, [(pass@1 interval labelled by run, cost)]); a run keeps
    its colour across panels.
    """
    labels = list(dict.fromkeys(iv.label for _, pts in panels for iv, _ in pts))
    colours = {lab: _colour(i) for i, lab in enumerate(labels)}
    # At least 5.5 in wide: with one panel the title would not fit.
    with _figure(max(5.5, 3.3 * max(1, len(panels))), 3.3) as fig:
        axes = fig.subplots(1, max(1, len(panels)), sharey=True, squeeze=False)[0]
        for ax, (xlabel, pts) in zip(axes, panels, strict=False):
            for iv, x in pts:
                ax.errorbar(
                    x,
                    iv.mean,
                    yerr=[[iv.mean - iv.low], [iv.high - iv.mean]],
                    fmt="o",
                    color=colours[iv.label],
                    capsize=4,
                    ms=7,
                    label=iv.label,
                )
            ax.set_xlabel(xlabel)
            ax.set_xlim(left=0, right=max([x for _, x in pts], default=1.0) * 1.25 or 1.0)
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_ylim(0, 1.02)
        axes[0].set_ylabel("pass@1 (bars: 95% CI)")
        by_label: dict[str, Artist] = {}
        for ax in axes:
            for h, name in zip(*ax.get_legend_handles_labels(), strict=True):
                by_label.setdefault(name, h)
        fig.legend(
            list(by_label.values()),
            list(by_label),
            loc="outside lower center",
            ncol=min(4, len(labels)),
            fontsize=8,
            frameon=False,
        )
        fig.suptitle("quality against cost (up and left is better)", fontweight="bold")
        return _svg(fig)


def reward_curve(points: Sequence[tuple[int, float, float]]) -> str:
    """Training curve: mean reward and pass rate per step, two panels sharing the step axis."""
    if not points:
        raise ValueError("reward_curve needs at least one (step, reward_mean, pass_rate) point")
    step, reward, rate = (np.asarray(x, dtype=float) for x in zip(*points, strict=True))
    with _figure(6.4, 4.0) as fig:
        top, bottom = fig.subplots(2, 1, sharex=True)
        top.plot(step, reward, color=PALETTE[0], marker="o" if len(points) < 40 else None)
        top.set_ylabel("mean reward")
        top.set_title("training curve")
        bottom.plot(step, rate, color=PALETTE[2], marker="o" if len(points) < 40 else None)
        bottom.set_ylabel("pass rate")
        bottom.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        bottom.set_xlabel("training step")
        return _svg(fig)
