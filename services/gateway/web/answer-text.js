// The answer's text as DOM nodes, never as HTML: paragraphs, ```code blocks```, `code`, **bold**,
// # headings, and citation markers [n] / [n, m] turned into buttons by the caller's makeCitation(n).

// As chat writes them: passages count from 1, and a bracket before "(" is a link ("[0, 1]" and "[1](url)",
// which chat leaves as written, are no citation).
const MARKER = /\[([1-9]\d*(?:\s*,\s*[1-9]\d*)*)\](?!\()/g;

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
// Where a code span stood while **bold** is found: private-use characters a model does not write.
const HOLE = /\uE000(\d+)\uE001/g;
const BOLD = /(\*\*[^*\n]+\*\*)/;

function appendInline(parent, text, makeCitation) {
  // Code spans first (markers and asterisks inside code stay text), then **bold**, which may hold code.
  const codes = [];
  const masked = text.replace(/[\uE000\uE001]/g, "\uFFFD").replace(CODE_SPAN, (span, ticks, inner, at, all) => {
    if (at > 0 && all[at - 1] === "`") return span; // inside a longer run of backticks
    codes.push(inner.length > 2 && /^ .* $/.test(inner) ? inner.slice(1, -1) : inner);
    return `\uE000${codes.length - 1}\uE001`;
  });
  masked.split(BOLD).forEach((piece, j) => {
    if (j % 2 === 1) {
      const strong = document.createElement("strong");
      appendCode(strong, piece.slice(2, -2), codes, makeCitation);
      parent.append(strong);
    } else {
      appendCode(parent, piece, codes, makeCitation);
    }
  });
}

function appendCode(parent, text, codes, makeCitation) {
  text.split(HOLE).forEach((piece, j) => {
    if (j % 2 === 1) {
      const code = document.createElement("code");
      code.textContent = codes[Number(piece)];
      parent.append(code);
    } else {
      appendMarkers(parent, piece, makeCitation);
    }
  });
}

// A fence opens on a line of its own: three or more backticks and an info string holding no backtick, or
// three or more tildes and any info string (CommonMark), indented by any number of spaces (a fence inside a
// list item is indented by the item). It closes on a line of as many of its characters or more alone, or at
// the end of the text (an answer still streaming, or a model that forgot). The code loses as much
// indentation as its opening fence had.
const FENCE_OPEN = /^( *)(?:(`{3,})[^`]*|(~{3,}).*)$/;
const FENCE_CLOSE = /^ *(`{3,}|~{3,})\s*$/;
const HEADING = /^#{1,6}\s+(.*)$/;

/** The text as [{code, text}] blocks, split at fenced code blocks. */
function blocksOf(text) {
  const blocks = [];
  let lines = [];
  let fence = null; // {indent, mark} of the open fence: its spaces, and its run of backticks or tildes
  const flush = () => {
    blocks.push({ code: Boolean(fence), text: lines.join("\n") });
    lines = [];
  };
  for (const line of text.split("\n")) {
    if (fence) {
      const close = line.match(FENCE_CLOSE);
      if (close && close[1][0] === fence.mark[0] && close[1].length >= fence.mark.length) {
        flush();
        fence = null;
      } else {
        lines.push(line.replace(new RegExp(`^ {0,${fence.indent}}`), ""));
      }
      continue;
    }
    const open = line.match(FENCE_OPEN);
    if (open) {
      flush();
      fence = { indent: open[1].length, mark: open[2] ?? open[3] };
    } else {
      lines.push(line);
    }
  }
  flush();
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
