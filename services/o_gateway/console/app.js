// The console's entry: a hash router (#/agents, #/agents/<id>, #/runs/<id>, ...) over
// views that read the gateway's API. A 401 anywhere asks for the API key, then retries.

import { ApiError, setApiKey } from "./api.js";
import { h, replace, say } from "./dom.js";
import { agentsView } from "./agents.js";
import { agentView } from "./agent.js";
import { evolutionView } from "./evolution.js";
import { healthView } from "./health.js";
import { runView, runsView } from "./runs.js";

const ROUTES = [
  [/^#\/agents\/([^/]+)\/evolution$/, evolutionView, "agents"],
  [/^#\/agents\/([^/]+)$/, agentView, "agents"],
  [/^#\/agents$/, agentsView, "agents"],
  [/^#\/runs\/([^/]+)$/, runView, "runs"],
  [/^#\/runs$/, runsView, "runs"],
  [/^#\/health$/, healthView, "health"],
];

const view = document.getElementById("view");
let generation = 0;

function keyForm(reason) {
  const input = h("input", { type: "password", name: "key", autocomplete: "off", required: true, "aria-label": "API key" });
  const form = h(
    "form",
    { id: "key-form", class: "card narrow", novalidate: true },
    h("h1", {}, "API key"),
    h("p", {}, reason),
    h("p", { class: "muted" }, "The key is kept in this tab only (sessionStorage) and sent with every API call as a bearer token."),
    h("label", {}, "Key ", input),
    h("button", { type: "submit" }, "Use this key"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) {
      say(form, "Enter the gateway's API key (O_API_KEY).");
      return;
    }
    setApiKey(key);
    route();
  });
  return form;
}

async function route() {
  const mine = ++generation;
  const hash = location.hash || "#/agents";
  const ctx = { alive: () => mine === generation, rerender: () => route() };
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.remove("active");
  for (const [pattern, render, nav] of ROUTES) {
    const match = hash.split("?")[0].match(pattern);
    if (!match) continue;
    document.querySelector(`[data-nav="${nav}"]`)?.classList.add("active");
    const params = new URLSearchParams(hash.split("?")[1] || "");
    try {
      replace(view, h("p", { class: "muted" }, "Loading…"));
      await render(view, match.slice(1).map(decodeURIComponent), params, ctx);
    } catch (err) {
      if (!ctx.alive()) return;
      if (err instanceof ApiError && err.status === 401) {
        replace(view, keyForm(err.message));
      } else {
        replace(view, h("div", { class: "card" }, h("h1", {}, "Error"), h("p", { class: "message error" }, err.message)));
      }
    }
    return;
  }
  replace(view, h("p", {}, "No such page. ", h("a", { href: "#/agents" }, "Agents")));
}

document.getElementById("forget-key").addEventListener("click", () => {
  setApiKey("");
  replace(view, keyForm("The key was forgotten."));
});
window.addEventListener("hashchange", route);
route();
