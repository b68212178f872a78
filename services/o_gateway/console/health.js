// Health: what GET /v1/health/ tells (version, status, the tool sandbox's isolation as a
// replica reports it). Consumers, lags and dead letters come with the operations routes
// (docs/console.md says which).

import { get } from "./api.js";
import { h, replace } from "./dom.js";

function rows(object, prefix = "") {
  return Object.entries(object).flatMap(([k, v]) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? rows(v, `${prefix}${k}.`)
      : [h("tr", {}, h("th", {}, `${prefix}${k}`), h("td", {}, Array.isArray(v) ? v.join(", ") : String(v)))],
  );
}

export async function healthView(root) {
  const health = await get("/v1/health/");
  replace(
    root,
    h("h1", {}, "Health"),
    h("p", { class: "row" }, h("span", { class: `status ${health.status === "ok" ? "completed" : "failed"}` }, health.status), h("span", {}, "version ", health.version)),
    h("h2", {}, "Tool sandbox"),
    h("table", { id: "sandbox", class: "kv" }, h("tbody", {}, rows(health.sandbox || {}))),
  );
}
