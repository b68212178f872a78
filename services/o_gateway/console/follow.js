// A view that follows changes: what it shows is read again every `every` ms, and shown
// again when it differs, until the user leaves the page (or there is nothing left to follow).

import { ApiError } from "./api.js";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// `read()` is asked again every `every` ms while `ctx.alive()` and `more(data)`; `show(data)`
// gets each answer that differs from the one shown last, unless `held()` (the user is
// filling in a form: it waits until they are done). A failed read (the gateway restarting)
// is tried again at the next tick; a 401 is the route's, which asks for the key.
export async function follow(ctx, every, data, read, show, { more = () => true, held = () => false } = {}) {
  let shown = JSON.stringify(data);
  while (ctx.alive() && more(data)) {
    await sleep(every);
    if (!ctx.alive()) return;
    try {
      data = await read();
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) throw err;
      continue;
    }
    if (!ctx.alive()) return;
    const seen = JSON.stringify(data);
    if (seen === shown || held()) continue;
    shown = seen;
    show(data);
  }
}

// Whether the user has started filling in a field under `root` (typed, or chose an option),
// is in one now, or has a form's message to read.
export function editing(root) {
  const active = document.activeElement;
  if (active && root.contains(active) && active.matches("input, textarea, select")) return true;
  for (const field of root.querySelectorAll("input, textarea")) {
    if (field.type === "checkbox" ? field.checked !== field.defaultChecked : field.value !== field.defaultValue) return true;
  }
  for (const select of root.querySelectorAll("select")) {
    // (With no option marked selected, the first one is.)
    const initial = [...select.options].findIndex((o) => o.defaultSelected);
    if (select.selectedIndex !== Math.max(initial, 0)) return true;
  }
  // A message a form showed (the API's refusal, "Working…") stays until the next action.
  return root.querySelector("form .message") !== null;
}
