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

function appendInline(parent, text, makeCitation) {
  // Split on `code` first (markers inside code stay text), then on **bold**.
  text.split(/(`[^`\n]+`)/).forEach((part, i) => {
    if (i % 2 === 1) {
      const code = document.createElement("code");
      code.textContent = part.slice(1, -1);
      parent.append(code);
      return;
    }
    part.split(/(\*\*[^*\n]+\*\*)/).forEach((piece, j) => {
      if (j % 2 === 1) {
        const strong = document.createElement("strong");
        appendMarkers(strong, piece.slice(2, -2), makeCitation);
        parent.append(strong);
      } else {
        appendMarkers(parent, piece, makeCitation);
      }
    });
  });
}

/** Replace the contents of `container` with `text` rendered safely; markers stay text without makeCitation. */
export function renderAnswerText(container, text, makeCitation = () => null) {
  const blocks = [];
  text.split(/^```[^\n]*\n?/m).forEach((chunk, i) => {
    if (i % 2 === 1) {
      const pre = document.createElement("pre");
      const code = document.createElement("code");
      code.textContent = chunk.replace(/\n$/, "");
      pre.append(code);
      blocks.push(pre);
      return;
    }
    for (const paragraph of chunk.split(/\n\s*\n/)) {
      if (!paragraph.trim()) continue;
      const p = document.createElement("p");
      const heading = paragraph.trim().match(/^#{1,6}\s+(.*)$/s);
      if (heading) p.className = "heading";
      appendInline(p, heading ? heading[1] : paragraph.trim(), makeCitation);
      blocks.push(p);
    }
  });
  container.replaceChildren(...blocks);
}
