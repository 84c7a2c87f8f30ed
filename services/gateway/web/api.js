// Calls to the gateway (same origin): log-in, log-out, who am I, the streamed answer, feedback, a new password.

export class ApiError extends Error {
  constructor({ status, code, message, retryAfter = null }) {
    super(message);
    this.status = status; // 0: the request never got an answer
    this.code = code;
    this.retryAfter = retryAfter; // seconds to wait, from the Retry-After of a 429 or a 503
  }
}

/** Seconds from a Retry-After header (whole seconds, or an HTTP date); null when absent or unreadable. */
export function retryAfterSeconds(value) {
  const text = (value ?? "").trim();
  if (/^\d+$/.test(text)) return Number.parseInt(text, 10);
  const date = Date.parse(text);
  return Number.isNaN(date) ? null : Math.max(0, Math.ceil((date - Date.now()) / 1000));
}

/** "1 second", "5 seconds". */
export function inSeconds(seconds) {
  return `${seconds} second${seconds === 1 ? "" : "s"}`;
}

/** When to try again: in the seconds a 429's or 503's Retry-After gave, else "in a moment". */
export function tryAgain(error) {
  return error.retryAfter ? `Try again in ${inSeconds(error.retryAfter)}.` : "Try again in a moment.";
}

async function errorFrom(response) {
  let body = {};
  try {
    body = await response.json();
  } catch {
    // not JSON: keep the status alone
  }
  return new ApiError({
    status: response.status,
    code: typeof body.error === "string" ? body.error : `http_${response.status}`,
    message: typeof body.message === "string" ? body.message : response.statusText,
    retryAfter: retryAfterSeconds(response.headers.get("Retry-After")),
  });
}

/** One same-origin request with the bearer token; an ApiError for a status >= 400 or no answer at all. */
export async function call(path, { token, body, method = "POST", signal, accept = "application/json" } = {}) {
  const headers = { Accept: accept };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      credentials: "omit",
      cache: "no-store",
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError({ status: 0, code: "network_error", message: "Cairn could not be reached." });
  }
  if (!response.ok) throw await errorFrom(response);
  return response;
}

export async function login(username, password) {
  return (await call("/auth/login", { body: { username, password } })).json();
}

export async function logout(token) {
  await call("/auth/logout", { token });
}

export async function me(token) {
  return (await call("/auth/me", { token, method: "GET" })).json();
}

/** Change the caller's password; resolves to how many of its other sessions ended. */
export async function changePassword(token, { current, next }) {
  const response = await call("/auth/password", { token, body: { current_password: current, new_password: next } });
  return (await response.json()).sessions_ended;
}

export async function sendFeedback(token, { requestId, rating }) {
  await call("/api/feedback", { token, body: { request_id: requestId, rating } });
}

/** Server-Sent Events from a fetch() body: yields {event, data} with data as text. */
export async function* readEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let name = "";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (value) buffer += value;
    if (done && buffer.endsWith("\r")) buffer += "\n"; // nothing follows: that "\r" ends its line
    // Take every complete line; a trailing "\r" may be the first half of "\r\n", so wait for more.
    let end;
    while ((end = buffer.search(/\r\n|\n|\r(?=.)/s)) !== -1) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
      if (line === "") {
        if (data.length) yield { event: name || "message", data: data.join("\n") };
        name = "";
        data = [];
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const field = colon === -1 ? line : line.slice(0, colon);
        const text = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") name = text;
        else if (field === "data") data.push(text);
      }
    }
    if (done) return; // an event left without its blank line was cut off: dropped, as EventSource does
  }
}

/** POST the question and yield the stream's events with their JSON data parsed. */
export async function* streamChat(token, { query, conversationId, signal }) {
  const body = { query };
  if (conversationId) body.conversation_id = conversationId;
  const response = await call("/api/chat/stream", { token, body, signal });
  for await (const { event, data } of readEvents(response.body)) {
    let parsed;
    try {
      parsed = JSON.parse(data);
    } catch {
      continue;
    }
    yield { event, data: parsed };
  }
}
