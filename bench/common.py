"""What every bench section shares: figures with their baseline and target, repeats, timing, the data."""
from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Figure:
    """One benchmark figure: the median of per-repeat comparisons against a baseline of the same repeat.

    `kind` "ratio": compared = value / baseline (higher is better, target = at least);
    "excess": compared = value - baseline (lower is better, target = at most).
    """

    name: str
    unit: str
    kind: str
    target: float | None
    values: list[float] = field(default_factory=list)
    baselines: list[float] = field(default_factory=list)
    baseline_name: str = ""
    note: str = ""

    def add(self, value: float, baseline: float) -> None:
        self.values.append(value)
        self.baselines.append(baseline)

    @property
    def compared(self) -> list[float]:
        if self.kind == "ratio":
            return [v / b if b else float("nan") for v, b in zip(self.values, self.baselines)]
        return [v - b for v, b in zip(self.values, self.baselines)]

    @property
    def result(self) -> float:
        return statistics.median(self.compared)

    @property
    def passed(self) -> bool | None:
        if self.target is None or not self.values:
            return None
        return self.result >= self.target if self.kind == "ratio" else self.result <= self.target

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data.update(
            value_median=_round(statistics.median(self.values)),
            baseline_median=_round(statistics.median(self.baselines)),
            result=_round(self.result),
            compared=[_round(c) for c in self.compared],
            repeats=len(self.values),
            passed=self.passed,
        )
        data["values"] = [_round(v) for v in self.values]
        data["baselines"] = [_round(b) for b in self.baselines]
        return data


def _round(x: float) -> float:
    return round(x, 4) if abs(x) < 10 else round(x, 1)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def timed_ms(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def load_average() -> float:
    return os.getloadavg()[0]


def scifact_dir(explicit: str | None) -> Path:
    """--scifact, else $CAIRN_EVALSETS/scifact, else ../shared/evalsets/scifact beside the repository."""
    if explicit:
        return Path(explicit)
    root = Path(os.environ["CAIRN_EVALSETS"]) if os.environ.get("CAIRN_EVALSETS") else REPO.parent / "shared" / "evalsets"
    return root / "scifact"


def format_table(figures: list[Figure]) -> str:
    rows = [("figure", "value", "baseline", "result", "target", "ok", "repeats")]
    for f in figures:
        sign = "x" if f.kind == "ratio" else f" {f.unit}"
        target = "" if f.target is None else (f">= {f.target:g}x" if f.kind == "ratio" else f"<= +{f.target:g} {f.unit}")
        ok = {True: "PASS", False: "FAIL", None: "-"}[f.passed]
        rows.append(
            (
                f.name,
                f"{statistics.median(f.values):.1f} {f.unit}",
                f"{statistics.median(f.baselines):.1f} {f.unit} ({f.baseline_name})",
                f"{f.result:+.2f}{sign}" if f.kind != "ratio" else f"{f.result:.2f}{sign}",
                target,
                ok,
                " ".join(f"{c:.2f}" for c in f.compared),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
