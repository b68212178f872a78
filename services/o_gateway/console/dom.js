// Building the page from data without innerHTML: every value from the API becomes a text
// node, so nothing an agent or a user wrote can run as markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "class") {
      el.className = value;
    } else if (value === true) {
      el.setAttribute(key, "");
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// A table from rows: columns are [heading, row => cell content].
export function table(columns, rows, attrs = {}) {
  return h(
    "table",
    attrs,
    h("thead", {}, h("tr", {}, columns.map(([name]) => h("th", {}, name)))),
    h(
      "tbody",
      {},
      rows.length
        ? rows.map((row) => h("tr", {}, columns.map(([, cell]) => h("td", {}, cell(row)))))
        : h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, "none")),
    ),
  );
}

export function time(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

export function ms(value) {
  if (value === null || value === undefined) return "–";
  return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${value.toFixed(1)} ms`;
}

export function short(id) {
  return id ? id.replace(/^([a-z]+-)(.{8}).*$/, "$1$2…") : "–";
}

// A form's message line: errors (validation or the API's detail) and confirmations.
export function say(form, text, kind = "error") {
  let line = form.querySelector(":scope > .message");
  if (!line) {
    line = h("p", { class: "message", role: "status" });
    form.append(line);
  }
  line.className = `message ${kind}`;
  line.textContent = text;
}
