// One question and its answer: streamed text, citation panel, sources, confidence, feedback.
import { renderAnswerText } from "./answer-text.js";

let nextId = 0;
const VERDICTS = { supported: "Supported by the passage", weak: "Partly supported", unsupported: "Not supported" };
const SNIPPET_CHARS = 200; // chat's snippet: the start of a passage this long at most

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** A link only for http(s) URLs (never javascript: or data:), resolved against the page. */
function safeUrl(url) {
  if (!url) return null;
  try {
    const parsed = new URL(url, window.location.href);
    return ["http:", "https:"].includes(parsed.protocol) ? parsed.href : null;
  } catch {
    return null;
  }
}

function sourceLink(url, label) {
  const href = safeUrl(url);
  if (!href) return null;
  const a = el("a", "source-link", label);
  a.href = href;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  return a;
}

/** A document's text in its own inline box: a bidi override in it (U+202E) reverses only itself, never the
 * page's text around it. An isolate alone would not do: a U+2069 in the text closes it early. */
export function isolated(text) {
  return el("span", "isolated", text);
}

/** "Title › Section (page 3)" as a string: for an attribute (aria-label, title). */
export function heading(cite) {
  let text = cite.title || cite.doc_id;
  if (cite.section) text += ` › ${cite.section}`;
  if (cite.page !== null && cite.page !== undefined) text += ` (page ${cite.page})`;
  return text;
}

/** The same heading as nodes, title and section each isolated: for the page. */
function headingNodes(cite) {
  const nodes = [isolated(cite.title || cite.doc_id)];
  if (cite.section) nodes.push(" › ", isolated(cite.section));
  if (cite.page !== null && cite.page !== undefined) nodes.push(` (page ${cite.page})`);
  return nodes;
}

function sameQuestion(a, b) {
  const norm = (s) => s.toLowerCase().replace(/[\s?.!]+/g, " ").trim();
  return norm(a) === norm(b);
}

export class Turn {
  /** `rate(requestId, rating)` sends a rating and says whether Cairn took it; `rated()` follows one it took. */
  constructor({ template, question, rate, rated = () => {} }) {
    this.id = `turn-${++nextId}`;
    this.question = question;
    this.rate = rate;
    this.rated = rated;
    this.text = "";
    this.end = null; // how a turn without an answer ended: "stopped", "failed" or "interrupted"
    this.rating = null; // the rating Cairn has accepted
    this.restarted = false; // sent as a follow-up, answered as a first question: Cairn had not kept the conversation
    this.sending = false;
    this.cites = new Map();
    this.openNumber = null;
    this.element = template.content.firstElementChild.cloneNode(true);
    const $ = (selector) => this.element.querySelector(selector);
    this.parts = {
      question: $(".question-text"),
      restarted: $(".restarted"),
      reformulated: $(".reformulated"),
      body: $(".answer-text"),
      status: $(".answer-status"),
      panel: $(".citation-panel"),
      footer: $(".answer-footer"),
      badge: $(".badge"),
      meta: $(".answer-meta"),
      feedback: $(".feedback"),
      feedbackStatus: $(".feedback-status"),
      sources: $(".sources"),
    };
    this.parts.question.textContent = question;
    this.parts.panel.id = `${this.id}-panel`;
    this.parts.status.textContent = "Searching the documents…";
    for (const button of this.parts.feedback.querySelectorAll("button[data-rating]")) {
      button.addEventListener("click", () => this.sendRating(Number(button.dataset.rating)));
    }
  }

  // --- while streaming -------------------------------------------------------------------------
  showSources(sources) {
    this.cites = new Map(sources.map((s) => [s.n, s]));
    this.parts.status.textContent = sources.length ? "Writing the answer…" : "";
  }

  addText(delta) {
    this.text += delta;
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = null;
      this.render();
    });
  }

  /** Draw the text again; a citation button the keyboard is on stays focused: the same one, counted in order. */
  render() {
    const cites = () => [...this.parts.body.querySelectorAll(".cite")];
    const focused = cites().indexOf(document.activeElement);
    renderAnswerText(this.parts.body, this.text, (n) => this.citationButton(n));
    if (focused !== -1) cites()[focused]?.focus();
  }

  // --- at the end --------------------------------------------------------------------------------
  finish(response) {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = null;
    this.text = response.answer;
    this.response = response;
    const reading = this.cites.get(this.openNumber); // a passage opened while the answer was written
    this.cites = new Map((response.citations ?? []).map((c) => [c.n, c]));
    this.closePanel();
    this.render();
    // Cairn numbers the citations anew at the end: the passage stays open under its final number, if cited.
    const cited = reading && [...this.cites.values()].find((c) => c.chunk_id === reading.chunk_id);
    if (cited) this.openPanel(cited.n);
    this.parts.body.setAttribute("aria-busy", "false");
    this.parts.status.textContent = "";
    this.element.classList.add("done");

    const meta = response.metadata ?? {};
    if (meta.reformulated_query && !sameQuestion(meta.reformulated_query, response.query)) {
      this.parts.reformulated.querySelector("q").textContent = meta.reformulated_query;
      this.parts.reformulated.hidden = false;
    }
    this.renderConfidence(response.confidence, meta.kind);
    this.renderMeta(meta);
    this.renderSources(response.sources ?? []);
    this.parts.feedback.hidden = !meta.request_id;
    this.parts.footer.hidden = false;
  }

  /** Say that the question, sent as part of the conversation above, was answered on its own. */
  showRestarted() {
    this.restarted = true;
    this.parts.restarted.hidden = false;
  }

  /** `announce`: false for a turn restored after a reload, whose failure is old news. */
  fail(message, { keepText = true, announce = true } = {}) {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = null;
    if (!keepText) this.text = "";
    if (this.text) this.render();
    else this.parts.body.replaceChildren();
    this.end = "failed";
    this.message = message;
    this.parts.body.setAttribute("aria-busy", "false");
    this.parts.status.textContent = message;
    this.parts.status.classList.add("error");
    if (announce) this.parts.status.setAttribute("role", "alert");
    this.element.classList.add("failed");
  }

  /** The user stopped the answer: the text so far stays, marked as stopped. */
  stop() {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = null;
    this.render();
    this.parts.body.setAttribute("aria-busy", "false");
    this.parts.status.textContent = this.text ? "Stopped. The answer is incomplete." : "Stopped.";
    this.end = "stopped";
    this.element.classList.add("stopped");
  }

  /** The page was reloaded while the answer was written: Cairn did not keep it. */
  interrupted() {
    this.end = "interrupted";
    this.parts.body.setAttribute("aria-busy", "false");
    this.parts.status.textContent = "Interrupted when the page was reloaded. Ask again for an answer.";
    this.element.classList.add("stopped", "interrupted");
  }

  renderConfidence(confidence, kind) {
    const badge = this.parts.badge;
    if (!confidence || kind === "small_talk") {
      badge.hidden = true;
      return;
    }
    const level = String(confidence.level);
    badge.classList.add(`badge-${level.toLowerCase()}`);
    badge.title = confidence.reason;
    badge.querySelector(".badge-level").textContent = `${level} confidence`;
    badge.querySelector(".badge-reason").textContent = `: ${confidence.reason}`;
    badge.hidden = false;
  }

  renderMeta(meta) {
    const bits = [];
    if (meta.model) bits.push(meta.model);
    const ms = meta.timings_ms?.total;
    if (ms) bits.push(ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`);
    this.parts.meta.textContent = bits.join(" · ");
  }

  renderSources(sources) {
    if (!sources.length) return;
    const list = this.parts.sources.querySelector("ol");
    for (const source of sources) {
      const item = el("li", "source");
      item.id = `${this.id}-source-${source.n}`;
      const title = el("span", "source-title");
      title.append(...headingNodes(source));
      item.append(el("span", "source-n", `${source.n}`), title);
      const where = el("span", "source-where");
      where.append(sourceLink(source.url, source.url) ?? el("span", "doc-id", source.doc_id));
      item.append(where);
      if (source.content) {
        const details = el("details", "passage");
        const passage = el("div", "passage-text");
        renderAnswerText(passage, source.content);
        details.append(el("summary", "", "Show passage"), passage);
        item.append(details);
      }
      list.append(item);
    }
    this.parts.sources.hidden = false;
  }

  // --- kept across a reload (see saved-conversation.js) -------------------------------------------
  /** The turn as data: the question, and the answer as Cairn sent it or how the turn ended. */
  toSaved() {
    if (this.response) {
      return { question: this.question, answer: this.response, rating: this.rating, restarted: this.restarted };
    }
    if (!this.end) return { question: this.question }; // still being answered
    return { question: this.question, end: this.end, text: this.text, message: this.message };
  }

  /** Show a kept turn again through the same rendering as a live one. */
  restore({ answer, rating, restarted, end, text, message }) {
    this.text = typeof text === "string" ? text : "";
    if (answer) {
      this.finish(answer);
      if (rating === 1 || rating === -1) this.showRating(rating);
      if (restarted === true) this.showRestarted();
    } else if (end === "stopped") this.stop();
    else if (end === "failed") this.fail(String(message ?? ""), { announce: false });
    else this.interrupted();
  }

  // --- citations ---------------------------------------------------------------------------------
  citationButton(n) {
    const cite = this.cites.get(n);
    if (!cite) return null;
    const button = el("button", "cite", String(n));
    button.type = "button";
    button.setAttribute("aria-label", `Citation ${n}: ${heading(cite)}`);
    button.setAttribute("aria-controls", this.parts.panel.id);
    button.setAttribute("aria-expanded", String(this.openNumber === n));
    button.title = heading(cite);
    button.dataset.n = String(n);
    button.addEventListener("click", () => (this.openNumber === n ? this.closePanel() : this.openPanel(n)));
    return button;
  }

  openPanel(n) {
    const cite = this.cites.get(n);
    if (!cite) return;
    const panel = this.parts.panel;
    const head = el("div", "panel-head");
    const title = el("strong", "panel-title");
    title.append(...headingNodes(cite));
    head.append(el("span", "source-n", String(n)), title);
    const close = el("button", "panel-close", "×");
    close.type = "button";
    close.setAttribute("aria-label", "Close the citation");
    close.addEventListener("click", () => {
      this.closePanel();
      this.parts.body.querySelector(`.cite[data-n="${n}"]`)?.focus();
    });
    head.append(close);

    const quote = el("blockquote", "snippet");
    const passage = this.passageOf(cite, quote);
    const facts = el("p", "panel-facts");
    if (cite.support?.verdict) {
      facts.append(el("span", `verdict verdict-${cite.support.verdict}`, VERDICTS[cite.support.verdict] ?? cite.support.verdict));
    }
    facts.append(sourceLink(cite.url, "Open the source") ?? el("span", "doc-id", cite.doc_id));
    panel.replaceChildren(head, quote, ...passage, facts);
    panel.hidden = false;
    this.openNumber = n;
    this.syncExpanded();
  }

  /** The passage in the quote: whole when short, else its start with a toggle that shows the rest. */
  passageOf(cite, quote) {
    const whole = cite.content ?? "";
    if (whole.length <= SNIPPET_CHARS || !cite.snippet) {
      renderAnswerText(quote, whole || cite.snippet || "");
      return [];
    }
    renderAnswerText(quote, cite.snippet);
    const details = el("details", "panel-passage");
    const summary = el("summary", "", "Show the whole passage");
    const text = el("div", "passage-text");
    renderAnswerText(text, whole);
    details.append(summary, text);
    details.addEventListener("toggle", () => {
      quote.hidden = details.open;
      summary.textContent = details.open ? "Show only the start" : "Show the whole passage";
    });
    return [details];
  }

  closePanel() {
    this.parts.panel.hidden = true;
    this.parts.panel.replaceChildren();
    this.openNumber = null;
    this.syncExpanded();
  }

  syncExpanded() {
    for (const button of this.parts.body.querySelectorAll(".cite")) {
      button.setAttribute("aria-expanded", String(Number(button.dataset.n) === this.openNumber));
    }
  }

  // --- feedback ----------------------------------------------------------------------------------
  /** Send a rating, one at a time; a later one replaces it. The thumbs stay enabled (and keep focus). */
  async sendRating(rating) {
    if (this.sending || rating === this.rating) return;
    this.sending = true;
    this.pressThumb(rating);
    this.parts.feedback.setAttribute("aria-busy", "true");
    this.parts.feedbackStatus.textContent = "Sending…";
    const ok = await this.rate(this.response.metadata.request_id, rating);
    if (ok) {
      this.rating = rating;
      this.rated();
    }
    this.sending = false;
    this.parts.feedback.setAttribute("aria-busy", "false");
    this.parts.feedbackStatus.textContent = ok ? "Thanks for your feedback." : "Feedback could not be sent.";
    this.parts.feedbackStatus.classList.toggle("quiet-error", !ok);
    this.pressThumb(this.rating);
  }

  /** A rating accepted before the page was reloaded. */
  showRating(rating) {
    this.rating = rating;
    this.pressThumb(rating);
  }

  pressThumb(rating) {
    for (const b of this.parts.feedback.querySelectorAll("button[data-rating]")) {
      b.setAttribute("aria-pressed", String(Number(b.dataset.rating) === rating));
    }
  }
}
