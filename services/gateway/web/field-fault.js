// A form field at fault, for assistive technology: marked invalid and described by the message that says
// why, so that a screen reader says it again whenever the field is focused (the message's live region says
// it once, as it appears).

const hints = new WeakMap(); // each field's own description (aria-describedby) from the page

/** Mark `field` among `fields` as the one at fault, described by `message` after its own hint; null: none. */
export function markFault(fields, field, message) {
  for (const each of fields) {
    if (!hints.has(each)) hints.set(each, each.getAttribute("aria-describedby") ?? "");
    const atFault = each === field;
    if (atFault) each.setAttribute("aria-invalid", "true");
    else each.removeAttribute("aria-invalid");
    const ids = [hints.get(each), atFault ? message.id : ""].filter(Boolean).join(" ");
    if (ids) each.setAttribute("aria-describedby", ids);
    else each.removeAttribute("aria-describedby");
  }
}
