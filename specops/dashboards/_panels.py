"""Small builders shared by the dashboards: variables, queries and panels with house defaults.

Every panel reads from the ``$datasource`` variable, so one dashboard works against any
Prometheus a Grafana knows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grafana_foundation_sdk.builders import bargauge, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders.common import ReduceDataOptions, VizLegendOptions
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardLinkType,
    DataSourceRef,
    DataTransformerConfig,
    VariableHide,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

__all__ = [
    "DATASOURCE",
    "FLEET_UID",
    "OVERVIEW_UID",
    "RATE",
    "LabelColumn",
    "Query",
    "annotation",
    "bar_gauge_panel",
    "dashboard_link",
    "datasource_variable",
    "label_variable",
    "stat_panel",
    "table_panel",
    "timeseries_panel",
]

# The dashboards' uids, which their links to each other name.
OVERVIEW_UID = "specops-overview"
FLEET_UID = "specops-fleet"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
# Grafana picks a window at least four scrape intervals long; rates use it everywhere.
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Query:
    """One PromQL target: the expression and the legend Grafana draws for each series."""

    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class LabelColumn:
    """A table column showing a label of the series ``query`` selects, not its value."""

    header: str
    label: str
    query: Query


def _target(query: Query, ref_id: str, *, table: bool = False) -> prometheus.Dataquery:
    target = (
        prometheus.Dataquery()
        .expr(query.expr)
        .ref_id(ref_id)
        .datasource(DATASOURCE)
        .legend_format(query.legend or "__auto")
    )
    if table:
        return target.instant().format(PromQueryFormat.TABLE)
    if query.instant:
        return target.instant()
    return target.range()


def _ref_id(index: int) -> str:
    return chr(ord("A") + index)


def datasource_variable() -> db.DatasourceVariable:
    """The Prometheus to read from, so one dashboard serves every cluster a Grafana knows."""
    return (
        db.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .current(VariableOption(selected=True, text="Prometheus", value="prometheus"))
    )


def label_variable(
    name: str, label: str, query: str, *, multi: bool, description: str
) -> db.QueryVariable:
    """A variable listing the values of ``name`` on the series ``query`` selects."""
    variable = (
        db.QueryVariable(name)
        .label(label)
        .description(description)
        .datasource(DATASOURCE)
        .query(f"label_values({query}, {name})")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .hide(VariableHide.DONT_HIDE)
    )
    if multi:
        variable = variable.multi(True).include_all(True).all_value(".*")
    return variable


def annotation(name: str, expr: str, color: str) -> db.AnnotationQuery:
    """Marks on every time series panel wherever ``expr`` returns a sample."""
    return (
        db.AnnotationQuery()
        .name(name)
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color(color)
        .expr(expr)
    )


def timeseries_panel(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str,
    width: int = 12,
    height: int = 8,
    minimum: float | None = None,
) -> timeseries.Panel:
    """A line chart with a table legend showing the mean and the last value."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .line_width(2)
        .fill_opacity(8)
        .legend(
            VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["mean", "lastNotNull"])
        )
    )
    if minimum is not None:
        panel = panel.min(minimum)
    for index, query in enumerate(queries):
        panel = panel.with_target(_target(query, _ref_id(index)))
    return panel


def stat_panel(
    title: str,
    description: str,
    query: Query,
    *,
    unit: str = "none",
    width: int = 4,
    height: int = 4,
    decimals: int | None = None,
    name_only: bool = False,
) -> stat.Panel:
    """One big number: the last value of ``query``, with a sparkline. ``name_only`` shows the
    series' legend instead, for a state carried in a label (the mode)."""
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .graph_mode(common.BigValueGraphMode.NONE if name_only else common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.NONE if name_only else common.BigValueColorMode.VALUE)
        .text_mode(
            common.BigValueTextMode.NAME if name_only else common.BigValueTextMode.VALUE_AND_NAME
        )
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .with_target(_target(query, "A"))
    )
    if decimals is not None:
        panel = panel.decimals(decimals)
    return panel


def bar_gauge_panel(
    title: str,
    description: str,
    query: Query,
    *,
    unit: str = "short",
    width: int = 12,
    height: int = 8,
) -> bargauge.Panel:
    """One horizontal bar per series, for a total over the dashboard's range (an instant query)."""
    return (
        bargauge.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .min(0)
        .decimals(0)
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
        .show_unfilled(True)
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .with_target(_target(Query(query.expr, query.legend, instant=True), "A"))
    )


def table_panel(
    title: str,
    description: str,
    columns: Sequence[tuple[str, Query]],
    *,
    label_columns: Sequence[LabelColumn] = (),
    width: int = 24,
    height: int = 8,
) -> table.Panel:
    """One row per label set: each instant query becomes a column, merged on shared labels.

    The value of a ``label_columns`` query is hidden: it only brings its label (a mode, say)
    into the rows it matches.
    """
    first_label = len(columns)
    panel = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .span(width)
        .height(height)
        .with_transformation(DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(
            DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {
                        "Time": True,
                        **{
                            f"Value #{_ref_id(first_label + index)}": True
                            for index in range(len(label_columns))
                        },
                    },
                    "renameByName": {
                        **{column.label: column.header for column in label_columns},
                        **{
                            f"Value #{_ref_id(index)}": header
                            for index, (header, _query) in enumerate(columns)
                        },
                    },
                },
            )
        )
    )
    queries = [query for _header, query in columns] + [c.query for c in label_columns]
    for index, query in enumerate(queries):
        panel = panel.with_target(_target(query, _ref_id(index), table=True))
    return panel


def dashboard_link(title: str, uid: str, tooltip: str) -> db.DashboardLink:
    """A link in the dashboard's header to another one, keeping the time range and the
    variables (the namespace and service a reader was looking at)."""
    return (
        db.DashboardLink(title)
        .type(DashboardLinkType.LINK)
        .url(f"/d/{uid}")
        .tooltip(tooltip)
        .include_vars(True)
        .keep_time(True)
        .icon("dashboard")
    )
