// The dashboard's calls to /api/analytics/* (same origin, with the bearer token): the reports and the CSV export.
import { call } from "./api.js";

function get(token, path, { accept, signal }) {
  return call(path, { token, method: "GET", accept, signal });
}

/** The query string of a report: the range as ISO instants, the model when one is chosen, and `extra`. */
export function reportQuery({ from, to, model }, extra = {}) {
  const params = new URLSearchParams({ from: from.toISOString(), to: to.toISOString(), ...extra });
  if (model) params.set("model", model);
  return params;
}

/** One JSON report, e.g. report(token, "summary", reportQuery(range)). */
export async function report(token, name, query, { signal } = {}) {
  const response = await get(token, `/api/analytics/${name}?${query}`, { accept: "application/json", signal });
  return response.json();
}

const LIMITS = { "top-queries": 10, gaps: 10, documents: 10, feedback: 20 };

/** Every report the page shows, fetched at once and keyed by name; the time series in buckets of `timeZone`'s
 * clock. Without a bucket (a range too long for any), the time series is not asked for and is null.
 * `modelChoices`: the models of the range for the Model list, all of them also while one model is chosen. */
export async function allReports(token, range, { bucket, timeZone, signal }) {
  const extras = { timeseries: { bucket, tz: timeZone } };
  for (const [name, limit] of Object.entries(LIMITS)) extras[name] = { limit };
  const names = ["summary", "timeseries", "top-queries", "gaps", "documents", "models", "feedback"].filter(
    (name) => bucket || name !== "timeseries",
  );
  const calls = names.map((name) => report(token, name, reportQuery(range, extras[name] ?? {}), { signal }));
  if (range.model) calls.push(report(token, "models", reportQuery({ ...range, model: "" }), { signal }));
  const bodies = await Promise.all(calls);
  const reports = { timeseries: null, ...Object.fromEntries(names.map((name, i) => [name, bodies[i]])) };
  const everyModel = range.model ? bodies[names.length] : reports.models;
  return { ...reports, modelChoices: everyModel.items.map((item) => item.model) };
}

// A UTF-8 byte order mark: without it, Excel reads a CSV file in the computer's own code page, and every
// question or comment beyond ASCII opens garbled. Only the button's file gets it; scripts read the API's.
const UTF8_BOM = "\ufeff";

/** Fetch the per-request CSV export (with the bearer token, so not as a plain link) and save it as a
 * file, named as the server suggests, marked as UTF-8 for spreadsheets. */
export async function downloadCsv(token, query) {
  const response = await get(token, `/api/analytics/export.csv?${query}`, { accept: "text/csv" });
  const named = /filename="?([^";]+)"?/i.exec(response.headers.get("Content-Disposition") ?? "");
  const body = await response.blob();
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([UTF8_BOM, body], { type: body.type }));
  link.download = named ? named[1] : "cairn-requests.csv";
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}
