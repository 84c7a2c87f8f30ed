// The dashboard's filters: a preset or custom time range and a model, kept in the page's URL so a view
// can be reloaded or shared; the time-series bucket that suits a range, in the browser's time zone; and
// the labels of those buckets.

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
export const PRESETS = { "1h": HOUR, "24h": DAY, "7d": 7 * DAY, "30d": 30 * DAY };
export const DEFAULT_RANGE = "24h";

/** {range, from, to, model} from a query string; from/to are Dates, set for a custom range only. */
export function readFilters(search) {
  const params = new URLSearchParams(search);
  const model = params.get("model") ?? "";
  const from = parseDate(params.get("from"));
  const to = parseDate(params.get("to"));
  if (from && to) return { range: "custom", from, to, model };
  const range = params.get("range");
  // Own keys only: "constructor" or "toString" are in every object and name no range.
  return { range: Object.hasOwn(PRESETS, range) ? range : DEFAULT_RANGE, from: null, to: null, model };
}

/** The query string that reads back as `filters`. */
export function writeFilters({ range, from, to, model }) {
  const params = new URLSearchParams();
  if (range === "custom") {
    params.set("from", from.toISOString());
    params.set("to", to.toISOString());
  } else {
    params.set("range", range);
  }
  if (model) params.set("model", model);
  return `?${params}`;
}

/** The [from, to) a filter stands for now; throws RangeError for a custom range that is empty or reversed. */
export function resolveRange({ range, from, to }, now = new Date()) {
  if (range !== "custom") return { from: new Date(now.getTime() - PRESETS[range]), to: now };
  if (!from || !to) throw new RangeError("Enter both a start and an end for the custom range.");
  if (from >= to) throw new RangeError("The start of the range must come before its end.");
  return { from, to };
}

// The time series answers at most this many points (services/analytics/reports/buckets.py), 422 beyond.
export const MAX_POINTS = 10_000;

/** The browser's IANA time zone, whose clock the time series follows; UTC when the browser cannot tell. */
export function browserTimeZone() {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  return zone && zone !== "Etc/Unknown" ? zone : "UTC";
}

const dateFormats = new Map();

/** The calendar day a zone's clock shows at `date`, counted in days from 1970-01-01. */
function dayNumber(date, timeZone) {
  if (!dateFormats.has(timeZone)) {
    const parts = { timeZone, year: "numeric", month: "numeric", day: "numeric" };
    dateFormats.set(timeZone, new Intl.DateTimeFormat("en-US", parts));
  }
  const parts = Object.fromEntries(dateFormats.get(timeZone).formatToParts(date).map((p) => [p.type, p.value]));
  const day = new Date(0);
  day.setUTCFullYear(Number(parts.year), Number(parts.month) - 1, Number(parts.day)); // Date.UTC reads 0-99 as 19xx
  return Math.round(day.getTime() / DAY);
}

/** The day buckets of a time series over [from, to): the calendar days of the zone's clock it touches. */
export function dayCount(from, to, timeZone = browserTimeZone()) {
  return dayNumber(new Date(to - 1), timeZone) - dayNumber(from, timeZone) + 1;
}

/** Minutes up to 3 hours, hours up to 8 days, days beyond: from about 24 to 200 points. Null for a range
 * whose days are more than MAX_POINTS (over 27 years): no bucket of the time series covers it. */
export function bucketFor(from, to, timeZone = browserTimeZone()) {
  const span = to - from;
  if (span <= 3 * HOUR) return "minute";
  if (span <= 8 * DAY) return "hour";
  return dayCount(from, to, timeZone) <= MAX_POINTS ? "day" : null;
}

function parseDate(text) {
  if (!text) return null;
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? null : date;
}

const pad = (n) => String(n).padStart(2, "0");

/** "YYYY-MM-DDTHH:MM:SS" in local time: the value of an <input type="datetime-local">. */
export function toLocalInput(date) {
  const day = `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;
  return `${day}T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

/** An <input type="datetime-local"> value (local time) as a Date; null when empty or invalid. */
export function fromLocalInput(text) {
  return parseDate(text); // a date-time without an offset is local time in ECMAScript
}

const LABEL_PARTS = {
  minute: { hour: "2-digit", minute: "2-digit" },
  hour: { day: "numeric", month: "short", hour: "2-digit", minute: "2-digit" },
  day: { day: "numeric", month: "short", year: "numeric" },
};

/** A label per bucket start (ISO instants), in the time the zone's clock showed: "1 Nov, 01:00". The hour
 * the clock is turned back through is shown twice, so there both labels name their offset ("01:00 EDT",
 * "01:00 EST"): each bucket keeps a place of its own on a chart. */
export function bucketLabels(starts, bucket, timeZone) {
  const plain = new Intl.DateTimeFormat(undefined, { timeZone, ...LABEL_PARTS[bucket] });
  const zoned = new Intl.DateTimeFormat(undefined, { timeZone, timeZoneName: "short", ...LABEL_PARTS[bucket] });
  const labels = starts.map((iso) => plain.format(new Date(iso)));
  const times = new Map();
  for (const label of labels) times.set(label, (times.get(label) ?? 0) + 1);
  return labels.map((label, i) => (times.get(label) > 1 ? zoned.format(new Date(starts[i])) : label));
}

/** "Showing 12 Mar 2026, 10:00:00 – 11:00:00 (local time, Europe/Paris)" for the range's label. */
export function describeRange(from, to, timeZone = browserTimeZone()) {
  const sameDay = dayNumber(from, timeZone) === dayNumber(to, timeZone);
  const date = { day: "numeric", month: "short", year: "numeric" };
  const time = { hour: "2-digit", minute: "2-digit", second: "2-digit", timeZone };
  const start = from.toLocaleString(undefined, { ...date, ...time });
  const end = to.toLocaleString(undefined, sameDay ? time : { ...date, ...time });
  return `Showing ${start} – ${end} (local time, ${timeZone})`;
}
