"""Where the declared charts sit (vega_tui/chart_specs.py): the chart grid's classes and its CSS.

Compact terminals (the default) show the primary chart beside one secondary chart (class
`-current`, `c` cycles them); roomy ones (`RunScreen.-roomy`) show every chart, two a row, a
`wide` one alone on its row; a chart that `shares` another's cell is shown instead of it (class
`-off` on the other).
"""

from __future__ import annotations

from collections.abc import Iterable

from vega_tui.chart_specs import CHARTS, ChartSpec

# The secondary charts, in the order `c` cycles them.
SECONDARY = tuple(spec.id for spec in CHARTS if spec.place.role == "secondary")
# (the chart whose cell is shared, the chart that takes it in turns): ("speech", "validation").
SWAPPED = next((spec.place.shares, spec.id) for spec in CHARTS if spec.place.shares)


def chart_classes(spec: ChartSpec, current: str, swapped_out: str) -> str:
    """The classes of a declared chart's widget (see the module's docstring)."""
    classes: list[str] = [spec.place.role]
    if spec.id == current:
        classes.append("-current")
    if spec.place.wide:
        classes.append("-wide")
    if spec.id == swapped_out:
        classes.append("-off")
    return " ".join(classes)


def roomy_rows(charts: Iterable[ChartSpec] = CHARTS) -> list[int]:
    """The roomy grid's rows, as their height weights: wide charts alone, the others two a row."""
    rows: list[int] = []
    half: int | None = None  # the weight of a row that holds one narrow chart so far
    for spec in charts:
        if spec.place.shares:
            continue  # it takes another chart's cell
        if spec.place.wide:
            if half is not None:
                rows.append(half)
                half = None
            rows.append(spec.place.weight)
        elif half is None:
            half = spec.place.weight
        else:
            rows.append(max(half, spec.place.weight))
            half = None
    if half is not None:
        rows.append(half)
    return rows


def grid_css(charts: Iterable[ChartSpec] = CHARTS) -> str:
    """The grid's size: compact, the primary chart and one secondary chart; roomy, every row."""
    rows = roomy_rows(charts)
    weights = " ".join(f"{weight}fr" for weight in rows)
    return f"""
    RunScreen ChartGrid {{ grid-size: 2 1; }}
    RunScreen.-roomy ChartGrid {{ grid-size: 2 {len(rows)}; grid-rows: {weights}; }}
    """
