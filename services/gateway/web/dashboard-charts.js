// The dashboard's charts as plotly figures. Each builder returns a figure, or null when the range holds
// nothing to draw: the chart area then says so instead of showing empty axes.
import * as fmt from "./dashboard-format.js";
import { axis, countAxis, draw, layout, theme } from "./dashboard-plot.js";
import { bucketLabels } from "./dashboard-range.js";

const BUCKET_NAMES = { minute: "per minute", hour: "per hour", day: "per day" };

// Over time, each bucket has a place of its own, labelled with the time the clock of the series' zone showed
// (the browser's, which the dashboard asks for). A date axis would need one wall-clock time per place: the
// hour the clock is turned back through would draw two buckets as one, and the hour it skips would show as
// an empty gap. So the buckets are categories, in order, one per point.
function times(series) {
  return bucketLabels(series.points.map((p) => p.start), series.bucket, series.tz);
}

/** The figure with its numbers as a table: a row per category (a time, a question, a document) under the
 * `heading` column, a column per trace. Pointing at the chart shows a value; the table gives them all to a
 * keyboard and a screen reader. `labels`: the categories as text, where the chart's are cut or escaped. */
function tabulated(figure, heading, { labels, format = fmt.count } = {}) {
  const across = figure.data[0].orientation === "h";
  const categories = labels ?? (across ? figure.data[0].y : figure.data[0].x);
  const values = (trace) => (across ? trace.x : trace.y);
  const rows = categories.map((category, i) => [category, ...figure.data.map((trace) => format(values(trace)[i]))]);
  return { ...figure, table: { columns: [heading, ...figure.data.map((trace) => trace.name)], rows } };
}

// Ticks fall on round clock times, every so many buckets, as many as the chart's width has room for.
const STRIDES = {
  minute: [1, 2, 5, 10, 15, 30, 60, 120],
  hour: [1, 2, 3, 6, 12, 24, 48, 96],
  day: [1, 2, 7, 14, 28, 91, 182, 364, 728, 1820, 3640],
};
const BUCKET_MINUTES = { minute: 1, hour: 60, day: 1440 };
const TICK_PX = 130;

/** The buckets of a clock reading since 1970-01-01 00:00: an ISO start carries its zone's clock reading. */
function clockBuckets(start, bucket) {
  return Math.round(Date.parse(`${start.slice(0, 16)}Z`) / 60_000 / BUCKET_MINUTES[bucket]);
}

function ticks(series, x, width) {
  const room = Math.max(2, Math.floor(width / TICK_PX));
  const stride = STRIDES[series.bucket].find((s) => x.length / s <= room) ?? Math.ceil(x.length / room);
  return x.filter((_, i) => clockBuckets(series.points[i].start, series.bucket) % stride === 0);
}

/** The same places on every chart over time: one per bucket, from the first to the last. */
function timeAxis(t, series, x) {
  return axis(t, `Time (${series.tz ?? "local"}, ${BUCKET_NAMES[series.bucket]})`, {
    type: "category",
    categoryorder: "array",
    categoryarray: x,
    range: [-0.5, x.length - 0.5],
    tickmode: "array",
    tickvals: ticks(series, x, t.width),
  });
}

// --- over time ----------------------------------------------------------------------------------
function volume(series, t) {
  const points = series?.points ?? [];
  if (!points.some((p) => p.queries > 0)) return null;
  const x = times(series);
  const bar = (name, y, color) => ({
    type: "bar",
    name,
    x,
    y,
    marker: { color },
    hovertemplate: `%{y} ${name.toLowerCase()}<extra></extra>`,
  });
  const data = [
    bar("Answered", points.map((p) => p.answered), t.good),
    bar("No answer", points.map((p) => p.no_answer), t.middling),
    bar("Failed", points.map((p) => p.failed), t.bad),
  ];
  const other = points.map((p) => Math.max(0, p.queries - p.answered - p.no_answer - p.failed));
  if (other.some((n) => n > 0)) data.push(bar("Other (small talk, pending)", other, t.muted));
  const largest = Math.max(...points.map((p) => p.queries));
  const xaxis = timeAxis(t, series, x);
  return tabulated({
    data,
    layout: layout(t, {
      barmode: "stack",
      hovermode: "x unified",
      xaxis,
      yaxis: countAxis(t, "Queries", largest),
    }),
  }, xaxis.title.text);
}

function latency(series, t) {
  const points = series?.points ?? [];
  if (!points.some((p) => p.latency_ms.p50 !== null)) return null;
  const x = times(series);
  const line = (key, color, dash) => ({
    type: "scatter",
    mode: "lines+markers",
    name: key,
    x,
    y: points.map((p) => p.latency_ms[key]),
    line: { color, dash },
    hovertemplate: `${key} %{y:,.0f} ms<extra></extra>`,
  });
  const xaxis = timeAxis(t, series, x);
  return tabulated({
    data: [line("p50", t.accent, "solid"), line("p95", t.middling, "dash"), line("p99", t.bad, "dot")],
    layout: layout(t, {
      hovermode: "x unified",
      xaxis,
      yaxis: axis(t, "Latency (ms)", { rangemode: "tozero" }),
    }),
  }, xaxis.title.text, { format: fmt.ms });
}

function answerRate(series, t) {
  const points = series?.points ?? [];
  if (!points.some((p) => p.answered_rate !== null)) return null;
  const x = times(series);
  const trace = {
    type: "scatter",
    mode: "lines+markers",
    name: "Answered",
    x,
    y: points.map((p) => (p.answered_rate === null ? null : p.answered_rate * 100)),
    line: { color: t.good },
    hovertemplate: "%{y:.1f} % answered<extra></extra>",
  };
  const xaxis = timeAxis(t, series, x);
  return tabulated({
    data: [trace],
    layout: layout(t, {
      showlegend: false,
      hovermode: "x unified",
      xaxis,
      yaxis: axis(t, "Answered (%)", { range: [0, 105], ticksuffix: " %" }),
    }),
  }, xaxis.title.text, { format: (value) => fmt.percent(value === null ? null : value / 100) });
}

// --- the range as a whole -----------------------------------------------------------------------
function confidence(summary, t) {
  const mix = summary?.confidence ?? { high: 0, medium: 0, low: 0 };
  // plotly labels a slice of 0 too ("Low 0%", on top of its neighbour): only the levels that occurred are drawn.
  const slices = [["High", mix.high, t.good], ["Medium", mix.medium, t.middling], ["Low", mix.low, t.bad]]
    .filter(([, count]) => count > 0);
  if (!slices.length) return null;
  const trace = {
    type: "pie",
    hole: 0.55,
    sort: false,
    labels: slices.map(([label]) => label),
    values: slices.map(([, count]) => count),
    marker: { colors: slices.map(([, , color]) => color) },
    textinfo: "label+percent",
    hovertemplate: "%{label}: %{value} responses (%{percent})<extra></extra>",
  };
  const total = slices.reduce((sum, [, count]) => sum + count, 0);
  const table = {
    columns: ["Confidence", "Responses", "Share"],
    rows: slices.map(([label, count]) => [label, fmt.count(count), fmt.percent(count / total)]),
  };
  return { data: [trace], layout: layout(t, { showlegend: false, margin: { t: 16, r: 16, b: 16, l: 16 } }), table };
}

/** Horizontal bars, most frequent at the top, each label ranked so that equal shortened texts stay apart
 * and cut to what the chart's width leaves room for (the hover text and the table, under `heading`, keep it whole). */
function ranked(items, label, traces, t, title, heading) {
  const length = Math.min(48, Math.max(14, Math.floor(t.width / 20)));
  const y = items.map((item, i) => `${i + 1}. ${fmt.plotText(fmt.shorten(label(item), length))}`);
  const largest = Math.max(...items.map((item) => traces.reduce((sum, tr) => sum + tr.value(item), 0)));
  const data = traces.map((tr) => ({
    type: "bar",
    orientation: "h",
    name: tr.name,
    y,
    x: items.map(tr.value),
    marker: { color: tr.color },
    customdata: items.map((item) => fmt.plotText(label(item))),
    hovertemplate: `%{customdata}<br>%{x} ${tr.name.toLowerCase()}<extra></extra>`,
  }));
  return tabulated({
    data,
    layout: layout(t, {
      height: Math.max(200, 70 + 28 * items.length),
      barmode: "stack",
      showlegend: traces.length > 1,
      xaxis: countAxis(t, title, largest),
      yaxis: axis(t, "", { autorange: "reversed", gridcolor: "rgba(0,0,0,0)" }),
    }),
  }, heading, { labels: items.map((item, i) => `${i + 1}. ${label(item)}`) });
}

function topQueries(report, t) {
  const items = report?.items ?? [];
  if (!items.length) return null;
  return ranked(items, (q) => q.query, [
    { name: "Answered", value: (q) => q.answered, color: t.good },
    { name: "Not answered", value: (q) => q.count - q.answered, color: t.middling },
  ], t, "Times asked", "Question");
}

function gaps(report, t) {
  const items = report?.items ?? [];
  if (!items.length) return null;
  return ranked(items, (g) => g.query, [
    { name: "No answer", value: (g) => g.no_answer, color: t.bad },
    { name: "Low confidence", value: (g) => g.low_confidence, color: t.middling },
    { name: "Other answers", value: (g) => Math.max(0, g.count - g.no_answer - g.low_confidence), color: t.muted },
  ], t, "Times asked", "Question");
}

function documents(report, t) {
  const items = report?.most_cited ?? [];
  if (!items.length) return null;
  const citations = { name: "Citations", value: (d) => d.citations, color: t.accent };
  return ranked(items, (d) => d.doc_id, [citations], t, "Citations", "Document");
}

const BUILDERS = {
  volume: (r, t) => volume(r.timeseries, t),
  latency: (r, t) => latency(r.timeseries, t),
  "answer-rate": (r, t) => answerRate(r.timeseries, t),
  confidence: (r, t) => confidence(r.summary, t),
  "top-queries": (r, t) => topQueries(r["top-queries"], t),
  gaps: (r, t) => gaps(r.gaps, t),
  documents: (r, t) => documents(r.documents, t),
};

const OVER_TIME = new Set(["volume", "latency", "answer-rate"]);
const TOO_LONG = "This range is too long to draw over time (more than 10,000 days)";

/** Draw every chart of the page (containers `#chart-<name>`) from the reports, keyed by report name; the
 * charts over time say so when the range was too long for a time series (reports.timeseries null). None is
 * drawn once `signal` is aborted. */
export async function drawCharts(reports, { signal } = {}) {
  await Promise.all(
    Object.entries(BUILDERS).map(([name, build]) => {
      const container = document.getElementById(`chart-${name}`);
      const empty = OVER_TIME.has(name) && reports.timeseries === null ? TOO_LONG : undefined;
      return draw(container, build(reports, theme(container.clientWidth)), { empty, signal });
    }),
  );
}
