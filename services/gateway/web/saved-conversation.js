// The conversation on the chat page, kept in the tab's sessionStorage so that a reload shows it again and
// goes on with it. Only data is kept: each question as typed and its answer as Cairn sent it, never HTML.
//
// A kept turn: {question, answer?, rating?, restarted?, end?, text?, message?}
//   answer: the `done` event's JSON; rating: the thumb Cairn accepted for it; restarted: true when the question
//   was sent in a conversation Cairn no longer had (expired), so it was answered as a first question;
//   end: "stopped" | "failed" | "interrupted" for a turn without an answer (text: the words so far,
//   message: why it failed). A turn with neither answer nor end was still streaming when the page went away.

const KEY = "cairn.conversation";
const MAX_TURNS = 50;
const MAX_CHARS = 1_000_000; // well below the browser's quota, which the token and the dashboard share

/** {owner, conversationId, turns} kept in this tab, or null. */
export function load() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(KEY));
    if (typeof saved?.owner !== "string" || !Array.isArray(saved.turns)) return null;
    const turns = saved.turns.filter((turn) => typeof turn?.question === "string");
    const conversationId = typeof saved.conversationId === "string" ? saved.conversationId : null;
    return { owner: saved.owner, conversationId, turns };
  } catch {
    return null; // not JSON, or storage refused: nothing to restore
  }
}

/** Keep the newest turns that fit; when the browser refuses (quota), fewer; never throws. */
export function save({ owner, conversationId, turns }) {
  let kept = turns.slice(-MAX_TURNS);
  const sizes = kept.map((turn) => JSON.stringify(turn).length);
  let size = sizes.reduce((sum, n) => sum + n, 0);
  while (size > MAX_CHARS && kept.length > 1) {
    size -= sizes.shift();
    kept = kept.slice(1);
  }
  for (;;) {
    try {
      sessionStorage.setItem(KEY, JSON.stringify({ owner, conversationId, turns: kept }));
      return;
    } catch {
      // the quota is full (or storage is off): try again with the newer half
    }
    if (!kept.length) break;
    kept = kept.slice(Math.ceil(kept.length / 2));
  }
  clear(); // not even the conversation's id fits: better nothing than an old copy
}

export function clear() {
  try {
    sessionStorage.removeItem(KEY);
  } catch {
    // storage unavailable: nothing was kept
  }
}
