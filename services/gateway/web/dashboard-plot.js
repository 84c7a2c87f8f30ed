// plotly.js for the dashboard: loaded on first use from the gateway (/web/vendor/plotly.min.js, no CDN),
// the page's colours and fonts as a plotly layout, and a chart area that shows either a chart or
// "No data in this range".

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
    return;
  }
  if (container.dataset.drawn !== "chart") container.replaceChildren();
  // The area takes the chart's height: plotly redraws a chart to its area's size when the window is resized,
  // and an area sized by its content would give it none (drawn over the card below, then squeezed).
  container.style.height = `${figure.layout.height}px`;
  await Plotly.react(container, figure.data, figure.layout, CONFIG);
  container.dataset.drawn = "chart";
}

/** Empty every chart area (nothing to show, e.g. after a failed load). */
export function clearCharts() {
  for (const container of document.querySelectorAll(".chart")) {
    window.Plotly?.purge(container);
    container.replaceChildren();
    container.style.removeProperty("height");
    delete container.dataset.drawn;
  }
}
