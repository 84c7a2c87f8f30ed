// The chat page: log in, ask, follow up in the same conversation, change the password, log out.
import * as api from "./api.js";
import { markFault } from "./field-fault.js";
import { setUpPasswordDialog } from "./password-dialog.js";
import * as saved from "./saved-conversation.js";
import { Turn } from "./turn.js";

const reducedMotion = matchMedia("(prefers-reduced-motion: reduce)"); // asked for: no smooth scrolling

const TOKEN_KEY = "cairn.token";
const USER_KEY = "cairn.username";

const $ = (id) => document.getElementById(id);
const view = {
  skipLink: $("skip-link"),
  login: $("login-view"),
  loginForm: $("login-form"),
  loginMessage: $("login-message"),
  username: $("username"),
  password: $("password"),
  chat: $("chat-view"),
  session: $("session"),
  whoami: $("whoami"),
  dashboardLink: $("dashboard-link"),
  turns: $("turns"),
  intro: $("intro"),
  askForm: $("ask-form"),
  question: $("question"),
  askButton: $("ask-button"),
  newConversation: $("new-conversation"),
  logout: $("logout"),
  turnTemplate: $("turn-template"),
};

// owner: the user the turns on the page and conversationId belong to; they outlive an ended session
// so that the same user can log in again and go on. turns: the Turns of the conversation, kept in the
// tab (saved-conversation.js) so that a reload shows them again.
const state = { token: sessionStorage.getItem(TOKEN_KEY), conversationId: null, busy: null, owner: null, turns: [] };

/** What to tell the user about a failed call. */
function describe(error) {
  if (error instanceof api.ApiError) {
    switch (error.status) {
      case 0:
        return "Cairn could not be reached. Check your connection and try again.";
      case 429:
        return `Too many requests. ${api.tryAgain(error)}`;
      case 502:
        return "The language model is not answering right now. Try again in a moment.";
      case 503:
        // Not in brackets: the message often holds its own ("retrieval is unavailable (unreachable)").
        return `Cairn is partly unavailable: ${error.message.replace(/\.$/, "")}. ${api.tryAgain(error)}`;
      case 504:
        return "Cairn took too long to answer. Try again in a moment.";
      default:
        if (error.status >= 500) return "Something went wrong on Cairn's side. Try again in a moment.";
        return error.message || `Something went wrong (${error.status}).`;
    }
  }
  return "The answer was cut off. Try again.";
}

/** The HTTP status an error event's code stands for, when the event does not say (the stream itself was a 200). */
function statusOf(code = "") {
  if (code === "llm_unavailable") return 502;
  if (code.endsWith("_unavailable")) return 503;
  if (code.endsWith("_timeout")) return 504;
  return 500;
}

/** An error event as the error the same failure gets before the stream: chat's events carry its status and
 * Retry-After (a model that asks for a wait is a 503, not a 502); the gateway's own carry only the code. */
function streamError(data) {
  return new api.ApiError({
    status: Number.isInteger(data.status) ? data.status : statusOf(data.error),
    code: data.error,
    message: data.message,
    retryAfter: api.retryAfterSeconds(data.retry_after),
  });
}

// --- views ---------------------------------------------------------------------------------------
/** The log-in form; `keep`: the session ended on its own, so the conversation waits for its user, and an
 * answer being written goes on (its request was let in: only a side call such as a rating found the session over). */
function showLogin(message = "", kind = "notice", { keep = false } = {}) {
  state.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(USER_KEY);
  if (!keep) {
    forgetConversation();
    state.owner = null;
  }
  view.chat.hidden = true;
  view.session.hidden = true;
  view.skipLink.hidden = true; // it leads to the question box, which the log-in form hides
  view.login.hidden = false;
  say(message, kind);
  view.password.value = "";
  (view.username.value ? view.password : view.username).focus(); // after a session ended, its name is still there
}

function sessionEnded() {
  showLogin("Your session has ended. Please log in again.", "error", { keep: true });
}

function forgetConversation() {
  stopAnswer();
  state.conversationId = null;
  state.turns = [];
  saved.clear();
  view.turns.replaceChildren();
  setQuestion("");
}

function remember() {
  const turns = state.turns.map((turn) => turn.toSaved());
  saved.save({ owner: state.owner, conversationId: state.conversationId, turns });
}

/** Whether Cairn kept a turn of the conversation before `current`: an answer that was not small talk. */
function keptBefore(current) {
  return state.turns.some((turn) => turn !== current && turn.response && turn.response.metadata?.kind !== "small_talk");
}

function newTurn(question) {
  return new Turn({ template: view.turnTemplate, question, rate, rated: remember });
}

/** The conversation this tab kept, back on the page (hidden until its owner is logged in). */
function restoreConversation() {
  const kept = saved.load();
  if (!kept) return;
  state.owner = kept.owner;
  state.conversationId = kept.conversationId;
  for (const record of kept.turns) {
    const turn = newTurn(record.question);
    try {
      turn.restore(record);
    } catch {
      continue; // a kept answer this page cannot show: left out
    }
    state.turns.push(turn);
    view.turns.append(turn.element);
  }
  const last = kept.turns.at(-1);
  if (last && !last.answer && !last.end) setQuestion(last.question); // cut off by the reload: ready to send again
  remember(); // a turn cut off by the reload is kept as interrupted from now on
}

/** Put text in the question box, which grows with its lines. */
function setQuestion(text) {
  view.question.value = text;
  fitQuestion();
}

// CSS sizes the box to its text where the browser can (field-sizing); elsewhere it gets a row per line.
function fitQuestion() {
  if (CSS.supports("field-sizing", "content")) return;
  view.question.rows = Math.min(view.question.value.split("\n").length, 6);
}

/** `roles`: the user's, when known, to offer analysts and admins the dashboard. */
function showChat(username, roles = []) {
  if (state.owner !== username) forgetConversation(); // another user: nothing of the last one's
  state.owner = username;
  view.whoami.textContent = username;
  view.dashboardLink.hidden = !roles.some((role) => role === "analyst" || role === "admin");
  view.login.hidden = true;
  view.chat.hidden = false;
  view.session.hidden = false;
  view.skipLink.hidden = false;
  view.intro.hidden = view.turns.children.length > 0;
  view.question.focus();
}

/** While an answer streams the Ask button is a Stop button (type "button": Enter in the box stops nothing). */
function setBusy(controller) {
  state.busy = controller;
  view.askButton.type = controller ? "button" : "submit";
  view.askButton.textContent = controller ? "Stop" : "Ask";
  view.askButton.classList.toggle("button-stop", Boolean(controller));
  view.askForm.setAttribute("aria-busy", String(Boolean(controller)));
}

function stopAnswer() {
  state.busy?.abort();
  setBusy(null);
}

/** The log-in form's message; `field`: the field at fault, which it describes. */
function say(message, kind, field = null) {
  view.loginMessage.textContent = message;
  view.loginMessage.className = `login-message ${kind}`;
  markFault([view.username, view.password], field, view.loginMessage);
}

// --- log-in and log-out --------------------------------------------------------------------------
view.loginForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  say("", "notice");
  const button = view.loginForm.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    const session = await api.login(view.username.value.trim(), view.password.value);
    state.token = session.token;
    sessionStorage.setItem(TOKEN_KEY, session.token);
    sessionStorage.setItem(USER_KEY, session.user.username);
    view.password.value = "";
    showChat(session.user.username, session.user.roles);
  } catch (error) {
    if (error.status === 401) say("Wrong user name or password.", "error", view.password);
    else say(describe(error), "error");
    view.password.select();
  } finally {
    button.disabled = false;
  }
});

view.logout.addEventListener("click", async () => {
  const token = state.token;
  showLogin("You are logged out.");
  try {
    await api.logout(token);
  } catch {
    // the session is forgotten here either way; an expired one is already gone
  }
});

setUpPasswordDialog({ token: () => state.token, sessionEnded, describe });

view.newConversation.addEventListener("click", () => {
  const draft = view.question.value; // typed, or put back after a failure: it is asked in the new conversation
  forgetConversation();
  setQuestion(draft);
  view.intro.hidden = false;
  view.question.focus();
});

// --- asking --------------------------------------------------------------------------------------
async function rate(requestId, rating) {
  try {
    await api.sendFeedback(state.token, { requestId, rating });
    return true;
  } catch (error) {
    if (error.status === 401) sessionEnded();
    return false;
  }
}

async function ask(query) {
  const turn = newTurn(query);
  const turns = state.turns;
  turns.push(turn);
  remember(); // the question is kept even if the page is reloaded before the answer ends
  view.intro.hidden = true;
  view.turns.append(turn.element);
  turn.element.scrollIntoView({ block: "start", behavior: reducedMotion.matches ? "auto" : "smooth" });
  const controller = new AbortController();
  setBusy(controller);
  let finished = false;
  const continued = state.conversationId; // null: this question starts the conversation
  try {
    const events = api.streamChat(state.token, {
      query,
      conversationId: continued,
      signal: controller.signal,
    });
    for await (const { event, data } of events) {
      if (event === "sources") turn.showSources(data.sources ?? []);
      else if (event === "token") turn.addText(data.text ?? "");
      else if (event === "done") {
        state.conversationId = data.conversation_id;
        turn.finish(data);
        if (continued && data.new_conversation === true && keptBefore(turn)) turn.showRestarted();
        finished = true;
      } else if (event === "error") {
        turn.fail(describe(streamError(data)));
        finished = true;
      }
      // done and error are the stream's last events: a connection that breaks after one cuts off nothing.
      if (finished) break;
    }
    if (!finished) turn.fail("The answer was cut off. Try again.");
    if (turn.element.classList.contains("failed") && !view.question.value) setQuestion(query);
  } catch (error) {
    if (error.name === "AbortError") {
      if (!finished) turn.stop(); // by Stop; New conversation and Log out take the turn away anyway
      return;
    }
    if (error.status === 401) {
      turn.fail("Your session had ended. Log in again to ask this question.", { keepText: false });
      if (!view.question.value) setQuestion(query);
      sessionEnded();
      return;
    }
    if (error.code === "conversation_not_found") {
      state.conversationId = null;
      turn.fail("This conversation has expired. Ask again to start a new one.", { keepText: false });
    } else {
      turn.fail(describe(error)); // a connection broken mid-answer keeps the text so far, as a stream cut short does
    }
    if (!view.question.value) setQuestion(query); // ready to send again
  } finally {
    if (state.turns === turns) remember(); // not after New conversation or Log out took the turn away
    if (state.busy === controller) {
      setBusy(null);
      // After Ask or Stop was clicked the focus is on that button (or lost): back to the question box.
      if ([view.askButton, document.body, null].includes(document.activeElement)) view.question.focus();
    }
  }
}

view.askForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const query = view.question.value.trim();
  if (!query || state.busy) return;
  setQuestion("");
  ask(query);
});

// Enter sends, as in a one-line box; Shift+Enter is a new line, and Enter that ends an IME composition sends nothing.
view.question.addEventListener("keydown", (event) => {
  if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
  event.preventDefault();
  view.askForm.requestSubmit();
});
view.question.addEventListener("input", fitQuestion);

view.askButton.addEventListener("click", (event) => {
  if (!state.busy || view.askButton.type !== "button") return;
  event.preventDefault(); // the button is Ask again once stopped: no submit
  if (event.detail > 1) return; // the second click of a double click on Ask
  stopAnswer();
  view.question.focus();
});

// --- start ---------------------------------------------------------------------------------------
async function start() {
  if (!state.token) {
    showLogin(); // logged out (here or on the dashboard): no conversation is kept without a session
    return;
  }
  restoreConversation();
  try {
    const who = await api.me(state.token);
    showChat(who.user.username, who.user.roles);
  } catch (error) {
    if (error.status === 401) sessionEnded();
    else showChat(sessionStorage.getItem(USER_KEY) ?? "");
  }
  if (!view.chat.hidden) view.turns.lastElementChild?.scrollIntoView({ block: "start" });
}

start();
