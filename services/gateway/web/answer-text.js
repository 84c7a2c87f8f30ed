// The answer's text as DOM nodes, never as HTML: paragraphs, ```code blocks```, `code`, **bold**,
// # headings, and citation markers [n] / [n, m] turned into buttons by the caller's makeCitation(n).

const MARKER = /\[(\d+(?:\s*,\s*\d+)*)\]/g;

function appendMarkers(parent, text, makeCitation) {
  let last = 0;
  for (const match of text.matchAll(MARKER)) {
    const numbers = match[1].split(",").map((n) => Number.parseInt(n, 10));
    const buttons = numbers.map((n) => makeCitation(n)).filter(Boolean);
    if (!buttons.length) continue; // a number that names no passage stays as the model wrote it
    parent.append(text.slice(last, match.index));
    const group = document.createElement("span");
    group.className = "cites";
    group.append(...buttons);
    parent.append(group);
    last = match.index + match[0].length;
  }
  parent.append(text.slice(last));
}

// A code span: a run of one to three backticks, text, and a run of as many (```cairn up``` too).
const CODE_SPAN = /(`{1,3})([^`\n]|[^`\n][^\n]*?[^`\n])\1(?!`)/g;

function appendInline(parent, text, makeCitation) {
  // Code spans first (markers inside code stay text), then **bold**.
  let last = 0;
  for (const match of text.matchAll(CODE_SPAN)) {
    if (match.index > 0 && text[match.index - 1] === "`") continue; // inside a longer run of backticks
    appendProse(parent, text.slice(last, match.index), makeCitation);
    const code = document.createElement("code");
    code.textContent = match[2].length > 2 && /^ .* $/.test(match[2]) ? match[2].slice(1, -1) : match[2];
    parent.append(code);
    last = match.index + match[0].length;
  }
  appendProse(parent, text.slice(last), makeCitation);
}

function appendProse(parent, text, makeCitation) {
  text.split(/(\*\*[^*\n]+\*\*)/).forEach((piece, j) => {
    if (j % 2 === 1) {
      const strong = document.createElement("strong");
      appendMarkers(strong, piece.slice(2, -2), makeCitation);
      parent.append(strong);
    } else {
      appendMarkers(parent, piece, makeCitation);
    }
  });
}

// A fence opens on a line of its own: ``` and an info string holding no backtick (CommonMark); it closes
// on a line of ``` alone, or at the end of the text (an answer still streaming, or a model that forgot).
const FENCE_OPEN = /^ {0,3}```[^`]*$/;
const FENCE_CLOSE = /^ {0,3}```\s*$/;
const HEADING = /^#{1,6}\s+(.*)$/;

/** The text as [{code, text}] blocks, split at fenced code blocks. */
function blocksOf(text) {
  const blocks = [];
  let lines = [];
  let inCode = false;
  for (const line of text.split("\n")) {
    if (inCode ? FENCE_CLOSE.test(line) : FENCE_OPEN.test(line)) {
      blocks.push({ code: inCode, text: lines.join("\n") });
      lines = [];
      inCode = !inCode;
    } else {
      lines.push(line);
    }
  }
  blocks.push({ code: inCode, text: lines.join("\n") });
  return blocks.filter((block) => block.code || block.text.trim());
}

function paragraphsOf(prose, makeCitation) {
  const nodes = [];
  for (const paragraph of prose.split(/\n\s*\n/)) {
    const lines = paragraph.trim().split("\n");
    const heading = lines[0].match(HEADING);
    if (heading) {
      // Only its own line is the heading: a list or text right under it is a paragraph of its own.
      const p = document.createElement("p");
      p.className = "heading";
      appendInline(p, heading[1], makeCitation);
      nodes.push(p);
      lines.shift();
    }
    const rest = lines.join("\n").trim();
    if (!rest) continue;
    const p = document.createElement("p");
    appendInline(p, rest, makeCitation);
    nodes.push(p);
  }
  return nodes;
}

/** Replace the contents of `container` with `text` rendered safely; markers stay text without makeCitation. */
export function renderAnswerText(container, text, makeCitation = () => null) {
  const nodes = blocksOf(text).flatMap((block) => {
    if (!block.code) return paragraphsOf(block.text, makeCitation);
    const pre = document.createElement("pre");
    const code = document.createElement("code");
    code.textContent = block.text;
    pre.append(code);
    return [pre];
  });
  container.replaceChildren(...nodes);
}
