// How the dashboard writes its figures: a missing value (null: nothing to measure) is an em dash.

export const NONE = "—";

const missing = (value) => value === null || value === undefined || Number.isNaN(value);

export function count(value) {
  return missing(value) ? NONE : Math.round(value).toLocaleString("en");
}

/** A share in [0, 1] as a percentage: 0.8333 → "83.3 %". */
export function percent(value) {
  return missing(value) ? NONE : `${(value * 100).toFixed(1)} %`;
}

export function ms(value) {
  return missing(value) ? NONE : `${Math.round(value).toLocaleString("en")} ms`;
}

/** An amount in US dollars, to the cent, or to a millionth of a dollar below a cent: 0.018 → "0.02". */
export function dollars(value) {
  if (missing(value)) return NONE;
  const digits = value === 0 || value >= 0.01 ? 2 : 6;
  return value.toLocaleString("en", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

export function decimal(value, digits = 2) {
  return missing(value) ? NONE : value.toFixed(digits);
}

/** A score in [-1, 1] with its sign: 0.5 → "+0.50". */
export function signed(value) {
  return missing(value) ? NONE : `${value > 0 ? "+" : ""}${value.toFixed(2)}`;
}

export function plural(n, one, many = `${one}s`) {
  return `${count(n)} ${n === 1 ? one : many}`;
}

/** A long question cut to `length` characters for an axis label (the hover text keeps it whole). */
export function shorten(text, length = 48) {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length <= length ? flat : `${flat.slice(0, length - 1)}…`;
}

/** Text from users for Plotly, which draws a few HTML tags in labels and hover text (<a href>, <b>,
 * <span style>): written with entities, so a question shows as typed and cannot become a link. */
export function plotText(text) {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

export function dateTime(iso) {
  return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}
