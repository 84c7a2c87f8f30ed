// The analytics dashboard: log in (the chat page's session, kept for the tab, is reused), check the
// analyst role, then show the figures of the chosen time range and model.
import * as api from "./api.js";
import { allReports, downloadCsv, reportQuery } from "./dashboard-api.js";
import { drawCharts } from "./dashboard-charts.js";
import { clearCharts } from "./dashboard-plot.js";
import * as range from "./dashboard-range.js";
import { markFault } from "./field-fault.js";
import { renderFeedback, renderModels, renderNeverCited, renderTiles } from "./dashboard-tiles.js";

const TOKEN_KEY = "cairn.token"; // the chat page's keys: one log-in serves both pages
const USER_KEY = "cairn.username";
const ANALYST_ROLES = ["analyst", "admin"];
// Figures refused for a while (503) load again by themselves: after the Retry-After, or this many seconds.
const RELOAD_AFTER_S = 10;
const RELOAD_AFTER_AT_MOST_S = 300;

const $ = (id) => document.getElementById(id);
const view = {
  skipLink: $("skip-link"),
  login: $("login-view"),
  loginForm: $("login-form"),
  loginMessage: $("login-message"),
  username: $("username"),
  password: $("password"),
  forbidden: $("forbidden-view"),
  dashboard: $("dashboard-view"),
  session: $("session"),
  whoami: $("whoami"),
  logout: $("logout"),
  filters: $("filters"),
  range: $("range"),
  customRange: $("custom-range"),
  from: $("from"),
  to: $("to"),
  model: $("model"),
  exportButton: $("export"),
  status: $("status"),
  rangeLabel: $("range-label"),
  tiles: document.querySelector(".tiles"),
  neverCited: document.querySelector("[data-testid=never-cited]"),
  modelRows: $("models-rows"),
  feedbackFigures: $("feedback-figures"),
  feedbackList: $("feedback-list"),
};

// shown: the {filters, range} of the figures on the page, the range resolved when they were loaded.
// refused: the filters name a range refused since the last load started, whose message stays on the status line.
// reload: the timer of the load that follows figures refused for a while.
const state = {
  token: sessionStorage.getItem(TOKEN_KEY), filters: range.readFilters(location.search), load: null, shown: null,
  refused: false, reload: null,
};

/** The [from, to) of the figures on the page: a preset range ends when they were loaded, so the export and a
 * switch to a custom range cover what is shown, not the last hour from now. */
function shownRange() {
  return state.shown?.filters === state.filters ? state.shown.range : range.resolveRange(state.filters);
}

function say(node, message, kind = "notice") {
  node.textContent = message;
  node.classList.toggle("error", kind === "error");
}

const unavailable = (error) => `The figures are unavailable right now (${error.message}).`;

function describe(error) {
  if (!(error instanceof api.ApiError)) return error.message || "Something went wrong.";
  if (error.status === 0) return "Cairn could not be reached. Check your connection and try again.";
  // Too many failed logins, or too many exports streaming at once: both say when to try again.
  if (error.status === 429) return `Too many requests. ${api.tryAgain(error)}`;
  if (error.status === 503) return `${unavailable(error)} ${api.tryAgain(error)}`;
  if (error.status === 504) return "The analytics service took too long to answer. Try again in a moment.";
  if (error.status >= 500) return "Something went wrong on Cairn's side. Try again in a moment.";
  return error.message || `Something went wrong (${error.status}).`;
}

// --- views ---------------------------------------------------------------------------------------
function show(which, username = "") {
  for (const name of ["login", "forbidden", "dashboard"]) view[name].hidden = name !== which;
  view.session.hidden = which === "login";
  view.skipLink.hidden = which !== "dashboard"; // it leads to the figures, hidden in the other views
  view.whoami.textContent = username;
}

function showLogin(message = "", kind = "notice") {
  state.load?.abort();
  clearTimeout(state.reload);
  state.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(USER_KEY);
  show("login");
  say(view.loginMessage, message, kind);
  markFault([view.username, view.password], null, view.loginMessage);
  view.password.value = "";
  (view.username.value ? view.password : view.username).focus(); // after a session ended, its name is still there
}

function enter(user) {
  if (!user.roles.some((role) => ANALYST_ROLES.includes(role))) {
    show("forbidden", user.username);
    return;
  }
  showDashboard(user.username);
}

function showDashboard(username) {
  show("dashboard", username);
  showFilters();
  load();
}

// --- filters -------------------------------------------------------------------------------------
function showFilters() {
  const { range: chosen, from, to, model } = state.filters;
  view.range.value = chosen;
  view.customRange.hidden = chosen !== "custom";
  if (chosen === "custom") {
    view.from.value = range.toLocalInput(from);
    view.to.value = range.toLocalInput(to);
  }
  addModelOption(model);
  view.model.value = model;
}

function addModelOption(model) {
  if (!model || [...view.model.options].some((option) => option.value === model)) return;
  view.model.append(new Option(model, model));
}

/** The models of the range after "All models", and the chosen one (it may have none in this range) still chosen. */
function setModelOptions(models) {
  view.model.replaceChildren(new Option("All models", ""), ...models.map((model) => new Option(model, model)));
  addModelOption(state.filters.model);
  view.model.value = state.filters.model;
}

/** The instant an input holds: the range's own while the input still shows its time, as that may be one the
 * local clock shows twice (the hour it is turned back through) or carry milliseconds the input cannot show. */
function readInstant(input, kept) {
  const typed = range.fromLocalInput(input.value);
  return typed && kept && range.toLocalInput(typed) === range.toLocalInput(kept) ? kept : typed;
}

function readForm() {
  const chosen = view.range.value;
  if (chosen !== "custom") return { range: chosen, from: null, to: null, model: view.model.value };
  const [from, to] = [readInstant(view.from, state.filters.from), readInstant(view.to, state.filters.to)];
  return { range: chosen, from, to, model: view.model.value };
}

function applyFilters() {
  const filters = readForm();
  if (filters.range === "custom" && state.filters.range !== "custom") {
    // Custom starts from the range shown so far, for the analyst to adjust (not from an earlier custom range).
    const shown = shownRange();
    Object.assign(filters, shown);
    view.from.value = range.toLocalInput(shown.from);
    view.to.value = range.toLocalInput(shown.to);
  }
  view.customRange.hidden = filters.range !== "custom";
  state.filters = filters;
  load();
}

view.range.addEventListener("change", applyFilters);
view.model.addEventListener("change", applyFilters);
view.from.addEventListener("change", applyFilters);
view.to.addEventListener("change", applyFilters);
view.filters.addEventListener("submit", (event) => {
  event.preventDefault();
  applyFilters();
});

// --- the figures ---------------------------------------------------------------------------------
function clearFigures() {
  renderTiles(view.tiles, null);
  renderModels(view.modelRows, null);
  renderFeedback(view.feedbackFigures, view.feedbackList, null);
  renderNeverCited(view.neverCited, null);
  clearCharts();
}

async function load() {
  clearTimeout(state.reload);
  let resolved;
  try {
    resolved = range.resolveRange(state.filters);
  } catch (error) {
    state.refused = true; // a load still running draws its figures, and leaves this message in place
    say(view.status, error.message, "error");
    markFault([view.from, view.to], view.from, view.status); // the start that does not come before the end
    return;
  }
  state.refused = false;
  markFault([view.from, view.to], null, view.status);
  history.replaceState(null, "", range.writeFilters(state.filters));
  state.shown = { filters: state.filters, range: resolved };
  state.load?.abort();
  const controller = new AbortController();
  state.load = controller;
  const query = { ...resolved, model: state.filters.model };
  const timeZone = range.browserTimeZone();
  view.dashboard.dataset.state = "loading";
  view.rangeLabel.textContent = range.describeRange(resolved.from, resolved.to, timeZone);
  say(view.status, "Loading…");
  try {
    const bucket = range.bucketFor(resolved.from, resolved.to, timeZone);
    const reports = await allReports(state.token, query, { bucket, timeZone, signal: controller.signal });
    setModelOptions(reports.modelChoices);
    renderTiles(view.tiles, reports.summary);
    renderModels(view.modelRows, reports.models);
    renderFeedback(view.feedbackFigures, view.feedbackList, reports.feedback);
    renderNeverCited(view.neverCited, reports.documents);
    await drawCharts(reports, { signal: controller.signal });
    if (state.load !== controller) return; // a newer load has started meanwhile
    if (!state.refused) say(view.status, reports.summary.queries ? "" : "No questions were asked in this range.");
    view.dashboard.dataset.state = "ready";
  } catch (error) {
    if (error.name === "AbortError" || state.load !== controller) return;
    if (error.status === 401) return showLogin("Your session has ended. Please log in again.", "error");
    if (error.status === 403) return show("forbidden", view.whoami.textContent);
    clearFigures();
    view.dashboard.dataset.state = "error";
    if (error.status === 503) return reloadLater(error);
    if (!state.refused) say(view.status, describe(error), "error");
  }
}

/** Figures refused for a while (the session store or analytics down): say so, and load them again when the
 * gateway said to (its Retry-After), so that a page left open comes back by itself. */
function reloadLater(error) {
  const seconds = Math.min(error.retryAfter || RELOAD_AFTER_S, RELOAD_AFTER_AT_MOST_S);
  if (!state.refused) say(view.status, `${unavailable(error)} Trying again in ${api.inSeconds(seconds)}.`, "error");
  state.reload = setTimeout(load, seconds * 1000);
}

view.exportButton.addEventListener("click", async () => {
  let resolved;
  try {
    resolved = shownRange();
  } catch (error) {
    say(view.status, error.message, "error");
    return;
  }
  view.exportButton.disabled = true;
  try {
    await downloadCsv(state.token, reportQuery({ ...resolved, model: state.filters.model }));
  } catch (error) {
    if (error.status === 401) return showLogin("Your session has ended. Please log in again.", "error");
    say(view.status, `The export failed: ${describe(error)}`, "error");
  } finally {
    view.exportButton.disabled = false;
  }
});

// --- log-in and log-out --------------------------------------------------------------------------
view.loginForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  say(view.loginMessage, "");
  const button = view.loginForm.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    const session = await api.login(view.username.value.trim(), view.password.value);
    state.token = session.token;
    sessionStorage.setItem(TOKEN_KEY, session.token);
    sessionStorage.setItem(USER_KEY, session.user.username);
    view.password.value = "";
    enter(session.user);
    // The form that held the focus is hidden now: move it to the heading of what is shown, where a
    // keyboard or screen reader user continues (otherwise it falls back to the page itself).
    document.querySelector("section:not([hidden]) h1")?.focus();
  } catch (error) {
    const wrong = error.status === 401;
    say(view.loginMessage, wrong ? "Wrong user name or password." : describe(error), "error");
    markFault([view.username, view.password], wrong ? view.password : null, view.loginMessage);
    view.password.select();
  } finally {
    button.disabled = false;
  }
});

view.logout.addEventListener("click", async () => {
  const token = state.token;
  showLogin("You are logged out.");
  clearFigures(); // the next person at this tab sees none of them
  try {
    await api.logout(token);
  } catch {
    // the session is forgotten here either way; an expired one is already gone
  }
});

async function start() {
  if (!state.token) {
    showLogin();
    return;
  }
  try {
    enter((await api.me(state.token)).user);
  } catch (error) {
    if (error.status === 401) showLogin("Your session has ended. Please log in again.", "error");
    // Cairn unreachable or its session store down: the session may well be alive, so it is kept. The
    // reports check the session and the role themselves, and the status line says what failed.
    else showDashboard(sessionStorage.getItem(USER_KEY) ?? "");
  }
}

start();
