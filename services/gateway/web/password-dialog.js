// The chat page's dialog for changing one's own password (POST /auth/password).
import * as api from "./api.js";
import { markFault } from "./field-fault.js";

const $ = (id) => document.getElementById(id);

/** Wires the dialog: `token()` gives the session's token, `sessionEnded()` is called on a 401, and
 * `describe(error)` words any other failure as the page does. */
export function setUpPasswordDialog({ token, sessionEnded, describe }) {
  const dialog = $("password-dialog");
  const form = $("password-form");
  const [current, next, repeat] = [$("current-password"), $("new-password"), $("repeat-password")];
  const message = $("password-message");
  /** The message, and the field at fault (`field`, else none), which the keyboard is then put on. */
  const say = (text, kind, field = null) => {
    message.textContent = text;
    message.className = `login-message ${kind}`;
    markFault([current, next, repeat], field, message);
    field?.select();
  };

  $("change-password").addEventListener("click", () => {
    form.reset();
    say("", "notice");
    dialog.showModal();
    current.focus();
  });
  $("password-close").addEventListener("click", () => dialog.close());

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (next.value !== repeat.value) {
      say("The two new passwords differ.", "error", repeat);
      return;
    }
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const ended = await api.changePassword(token(), { current: current.value, next: next.value });
      form.reset();
      const others = ended === 1 ? "Your other session was ended." : `${ended} other sessions were ended.`;
      say(`Your password was changed.${ended ? ` ${others}` : ""}`, "notice");
    } catch (error) {
      if (error.status === 401) {
        dialog.close();
        sessionEnded();
        return;
      }
      const field = { 403: current, 422: next }[error.status] ?? null;
      say(wordsFor(error, describe), "error", field);
      if (!field) next.select(); // a 429 or a failure of Cairn's is no field's fault: back to the new password still
    } finally {
      button.disabled = false;
    }
  });
}

function wordsFor(error, describe) {
  if (error.status === 403) return "The current password is wrong.";
  if (error.status === 422) return "The new password must be 8 to 1024 characters long.";
  return describe(error); // 429 after too many wrong ones: how long to wait
}
