// The dashboard's figures as text: the KPI tiles, the per-model table and the feedback list.
// Every value goes in with textContent: questions and comments are user input.
import * as fmt from "./dashboard-format.js";

const EMPTY = "No data in this range";

function el(tag, { text, className, testid } = {}) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  if (testid) node.dataset.testid = testid;
  return node;
}

function failureHint(summary) {
  const stages = Object.entries(summary.failures_by_stage ?? {}).filter(([, n]) => n > 0);
  if (!stages.length) return `${fmt.count(summary.failed)} of ${fmt.count(summary.completed)}`;
  return stages.map(([stage, n]) => `${stage} ${fmt.count(n)}`).join(", ");
}

function feedbackHint({ ratings, positive, negative }) {
  if (!ratings) return "no ratings";
  return `${fmt.plural(ratings, "rating")}: ${fmt.count(positive)} good, ${fmt.count(negative)} bad`;
}

/** [value, hint] per tile, keyed as the tiles' data-kpi attributes. */
function tileTexts(s) {
  const pending = s.queries - s.completed;
  const done = s.completed > 0; // rates and latencies only mean something once a request has an outcome
  const when = (hint) => (done ? hint : "");
  return {
    queries: [
      fmt.count(s.queries),
      `${fmt.count(s.completed)} with an outcome${pending > 0 ? `, ${fmt.count(pending)} pending` : ""}`,
    ],
    distinct_users: [fmt.count(s.distinct_users), "who asked"],
    answered_rate: [fmt.percent(s.answered_rate), when(`${fmt.count(s.answered)} of ${fmt.count(s.completed)} answered`)],
    no_answer_rate: [fmt.percent(s.no_answer_rate), when(`${fmt.count(s.no_answer)} with no relevant information`)],
    failure_rate: [fmt.percent(s.failure_rate), when(failureHint(s))],
    latency_p50: [fmt.ms(s.latency_ms.p50), when(`mean ${fmt.ms(s.mean_latency_ms)}`)],
    latency_p95: [fmt.ms(s.latency_ms.p95), "receipt to response"],
    latency_p99: [fmt.ms(s.latency_ms.p99), "receipt to response"],
    mean_citations: [fmt.decimal(s.mean_citations), "per answered response"],
    supported_citation_rate: [fmt.percent(s.supported_citation_rate), "of the citations checked"],
    feedback_score: [fmt.signed(s.feedback.score), feedbackHint(s.feedback)],
    tokens: [fmt.count(s.tokens.total), `prompt ${fmt.count(s.tokens.prompt)}, completion ${fmt.count(s.tokens.completion)}`],
  };
}

/** Fill the tiles from a summary report; null clears them (no figures to show). */
export function renderTiles(root, summary) {
  const texts = summary ? tileTexts(summary) : {};
  for (const value of root.querySelectorAll("[data-kpi]")) {
    const [text, hint] = texts[value.dataset.kpi] ?? [fmt.NONE, ""];
    value.textContent = text;
    value.nextElementSibling.textContent = hint;
  }
}

/** One row per model; a single "No data" row when there is none. */
export function renderModels(body, models) {
  const items = models?.items ?? [];
  if (!items.length) {
    const cell = el("td", { text: EMPTY, className: "empty-row" });
    cell.colSpan = 10;
    const row = el("tr");
    row.append(cell);
    body.replaceChildren(row);
    return;
  }
  body.replaceChildren(
    ...items.map((m) => {
      const row = el("tr", { testid: "model-row" });
      row.append(el("th", { text: m.model }));
      row.lastChild.scope = "row";
      const numbers = [
        fmt.count(m.requests),
        fmt.percent(m.share),
        fmt.count(m.latency_ms.p50),
        fmt.count(m.latency_ms.p95),
        fmt.count(m.latency_ms.p99),
        fmt.count(m.tokens.prompt),
        fmt.count(m.tokens.completion),
        fmt.count(m.mean_total_tokens),
        fmt.dollars(m.cost_usd),
      ];
      row.append(...numbers.map((text) => el("td", { text })));
      return row;
    }),
  );
}

/** The feedback figures and the rated answers, newest first, with their comments. */
export function renderFeedback(figures, list, feedback) {
  const f = feedback?.figures ?? { ratings: 0, positive: 0, negative: 0, score: null };
  figures.textContent = f.ratings ? `${feedbackHint(f)}; score ${fmt.signed(f.score)}` : "";
  const items = feedback?.items ?? [];
  if (!items.length) {
    list.replaceChildren(el("li", { text: "No feedback in this range", className: "empty-row" }));
    return;
  }
  list.replaceChildren(
    ...items.map((item) => {
      const good = item.rating > 0;
      const entry = el("li", { className: "feedback-item", testid: "feedback-item" });
      entry.append(
        el("span", { text: good ? "Good" : "Bad", className: `rating ${good ? "rating-good" : "rating-bad"}` }),
        el("p", { text: item.query ?? "(the question was not recorded)", className: "feedback-query" }),
      );
      if (item.comment) entry.append(el("p", { text: item.comment, className: "feedback-comment" }));
      const who = item.user_id ? ` by user ${item.user_id}` : "";
      entry.append(el("p", { text: `Rated ${fmt.dateTime(item.rated_at)}${who}`, className: "feedback-meta" }));
      return entry;
    }),
  );
}

/** The never-cited documents under the most-cited chart: the first ones the report lists, and how many
 * more there are (the report's list is cut to its limit; never_cited_total counts them all). */
export function renderNeverCited(node, report) {
  const shown = (report?.never_cited ?? []).slice(0, 12);
  const total = Math.max(report?.never_cited_total ?? 0, shown.length);
  node.hidden = total === 0;
  const more = total > shown.length ? ` and ${fmt.count(total - shown.length)} more` : "";
  if (!total) {
    node.replaceChildren();
    return;
  }
  // Each doc_id in a box of its own (as the chat page's titles): a bidi override in one reverses only itself.
  const names = shown.flatMap((docId, i) => [...(i ? [", "] : []), el("span", { text: docId, className: "isolated" })]);
  node.replaceChildren("Never cited in this range: ", ...names, `${more}.`);
}
