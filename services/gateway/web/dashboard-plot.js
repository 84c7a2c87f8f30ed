// plotly.js for the dashboard: loaded on first use from the gateway (/web/vendor/plotly.min.js, no CDN),
// the page's colours and fonts as a plotly layout, and a chart area that shows either a chart, with its
// figures as a table under it, or "No data in this range".

const PLOTLY_URL = "/web/vendor/plotly.min.js";
const EMPTY = "No data in this range";
const CONFIG = {
  displaylogo: false,
  responsive: true,
  // plotly.js 4 would offer "Share chart...", which posts the figures (questions too) to Plotly Cloud.
  showSendToCloud: false,
  plotlyServerURL: "",
  modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
};

let plotly = null;

/** plotly.js, fetched the first time a chart is drawn. */
function loadPlotly() {
  plotly ??= new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = PLOTLY_URL;
    script.addEventListener("load", () => resolve(window.Plotly));
    script.addEventListener("error", () => {
      plotly = null; // the next refresh tries again
      reject(new Error("The chart library could not be loaded."));
    });
    document.head.append(script);
  });
  return plotly;
}

/** The page's colours (light or dark), read from its CSS variables, and the chart's width. */
export function theme(width) {
  const css = getComputedStyle(document.documentElement);
  const read = (name) => css.getPropertyValue(name).trim();
  return {
    width,
    text: read("--text"),
    muted: read("--muted"),
    grid: read("--border"),
    accent: read("--accent"),
    good: read("--high"),
    middling: read("--medium"),
    bad: read("--low"),
  };
}

export function axis(t, title, extra = {}) {
  return { title: { text: title }, gridcolor: t.grid, linecolor: t.grid, zerolinecolor: t.grid, automargin: true, ...extra };
}

export function layout(t, { height = 280, ...extra }) {
  return {
    height,
    margin: { t: 8, r: 12, b: 8, l: 8 },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 12, color: t.text },
    legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
    ...extra,
  };
}

/** Whole numbers on a count axis, even for counts of one or two. */
export function countAxis(t, title, largest) {
  return axis(t, title, { rangemode: "tozero", tickformat: ",d", ...(largest <= 10 ? { dtick: 1 } : {}) });
}

function cell(tag, text, scope) {
  const node = document.createElement(tag);
  node.textContent = text;
  if (scope) node.scope = scope;
  return node;
}

/** {columns, rows} of text as a table: a column heading each, and each row headed by its first value. */
function tableOf({ columns, rows }, caption) {
  const table = document.createElement("table");
  table.className = "figures";
  const title = cell("caption", caption);
  title.className = "visually-hidden"; // the chart's caption, just above, says it to the eye
  const head = table.createTHead().insertRow();
  head.append(...columns.map((name) => cell("th", name, "col")));
  const body = table.createTBody();
  for (const [label, ...values] of rows) {
    body.insertRow().append(cell("th", label, "row"), ...values.map((value) => cell("td", value)));
  }
  table.prepend(title);
  return table;
}

/** The figure's table under its chart, behind "Show as a table" (kept open or closed across loads), named by
 * the chart's caption; none when `table` is null. */
function showTable(container, table) {
  const next = container.nextElementSibling;
  let details = next?.classList.contains("chart-table") ? next : null;
  if (!table) {
    details?.remove();
    return;
  }
  if (!details) {
    details = document.createElement("details");
    details.className = "chart-table";
    container.after(details);
  }
  const caption = container.closest("figure")?.querySelector("figcaption")?.textContent ?? "";
  const scroll = document.createElement("div");
  scroll.className = "table-scroll";
  // A table wider than a phone scrolls sideways: the keyboard can scroll it once it is focused.
  scroll.tabIndex = 0;
  scroll.setAttribute("role", "group");
  scroll.setAttribute("aria-label", caption);
  scroll.append(tableOf(table, caption));
  details.replaceChildren(cell("summary", "Show as a table"), scroll);
}

/** Draw `figure` in the container, or say why not when it is null: no data, unless `empty` says otherwise.
 * Nothing is drawn once `signal` is aborted: a newer load owns the page by the time plotly has loaded. */
export async function draw(container, figure, { empty = EMPTY, signal } = {}) {
  const Plotly = await loadPlotly();
  if (signal?.aborted) return;
  if (!figure) {
    Plotly.purge(container);
    container.style.removeProperty("height");
    const note = document.createElement("p");
    note.className = "empty";
    note.textContent = empty;
    container.replaceChildren(note);
    container.dataset.drawn = "empty";
    showTable(container, null);
    return;
  }
  if (container.dataset.drawn !== "chart") container.replaceChildren();
  // The area takes the chart's height: plotly redraws a chart to its area's size when the window is resized,
  // and an area sized by its content would give it none (drawn over the card below, then squeezed).
  container.style.height = `${figure.layout.height}px`;
  await Plotly.react(container, figure.data, figure.layout, CONFIG);
  container.dataset.drawn = "chart";
  showTable(container, figure.table ?? null);
}

/** Empty every chart area (nothing to show, e.g. after a failed load). */
export function clearCharts() {
  for (const container of document.querySelectorAll(".chart")) {
    window.Plotly?.purge(container);
    container.replaceChildren();
    container.style.removeProperty("height");
    delete container.dataset.drawn;
    showTable(container, null);
  }
}
