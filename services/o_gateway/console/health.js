// Health: the system as `python -m o_ops status` shows it (GET /v1/operations/status, an O
// extension: every service process that answers the roll call with its readiness, each
// durable consumer's backlog and lag, each projection's lag, the dead letters kept), and
// what GET /v1/health/ tells (version, the tool sandbox's isolation). Read again every
// few seconds while the page is open.

import { get } from "./api.js";
import { h, replace, table, time } from "./dom.js";

const POLL_MS = 5000;

function rows(object, prefix = "") {
  return Object.entries(object).flatMap(([k, v]) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? rows(v, `${prefix}${k}.`)
      : [h("tr", {}, h("th", {}, `${prefix}${k}`), h("td", {}, Array.isArray(v) ? v.join(", ") : String(v)))],
  );
}

function seconds(value) {
  if (value < 10) return `${value.toFixed(1)} s`;
  if (value < 60) return `${Math.floor(value)} s`;
  if (value < 3600) return `${Math.floor(value / 60)} min ${Math.floor(value % 60)} s`;
  return `${Math.floor(value / 3600)} h ${Math.floor((value % 3600) / 60)} min`;
}

function yes(ok, good = "ready", bad = "not ready") {
  return h("span", { class: `status ${ok ? "completed" : "failed"}` }, ok ? good : bad);
}

function failing(checks) {
  const bad = Object.entries(checks || {}).filter(([, v]) => v !== "ok");
  return bad.length ? bad.map(([k, v]) => `${k}: ${v}`).join("; ") : "all checks ok";
}

function services(status) {
  const answered = status.services.map((p) => ({ ...p, answered: true }));
  const missing = status.expected
    .filter((s) => !status.services.some((p) => p.service === s))
    .map((s) => ({ service: s, answered: false }));
  return table(
    [
      ["service", (p) => p.service],
      ["instance", (p) => p.instance || "–"],
      ["ready", (p) => (p.answered ? yes(p.ready) : yes(false, "", "no answer"))],
      ["up since", (p) => (p.answered ? time(p.started_at) : "–")],
      ["checks", (p) => (p.answered ? failing(p.checks) : "no process answered the roll call")],
    ],
    [...answered, ...missing],
    { id: "services" },
  );
}

function consumers(status) {
  return table(
    [
      ["stream", (c) => c.stream],
      ["consumer", (c) => c.name],
      ["service", (c) => c.service],
      ["pending", (c) => (c.present ? String(c.pending) : yes(false, "", "missing"))],
      ["ack pending", (c) => String(c.ack_pending)],
      ["redelivered", (c) => String(c.redelivered)],
      ["waiting pulls", (c) => String(c.waiting)],
      ["lag", (c) => seconds(c.lag_seconds)],
    ],
    status.consumers,
    { id: "consumers" },
  );
}

function projections(status) {
  return table(
    [
      ["projection", (p) => p.name],
      ["service", (p) => p.service],
      ["position", (p) => `${p.position} of ${status.log_last_seq}`],
      ["lag", (p) => seconds(p.lag_seconds)],
    ],
    status.projections,
    { id: "projections" },
  );
}

function deadLetters(status) {
  const kept = Object.entries(status.dead_letters).map(([consumer, count]) => ({ consumer, count }));
  return h(
    "div",
    {},
    table(
      [
        ["consumer", (d) => d.consumer],
        ["kept", (d) => String(d.count)],
      ],
      kept,
      { id: "dead-letters" },
    ),
    kept.length
      ? h("p", { class: "muted" }, "Look at them and send commands again with ", h("code", {}, "python -m o_ops dead-letters list | show ID | redrive ID"), ".")
      : "",
  );
}

function render(root, health, status) {
  const ok = status.problems.length === 0;
  replace(
    root,
    h("h1", {}, "Health"),
    h(
      "p",
      { class: "row" },
      h("span", { id: "verdict" }, yes(ok, "ok", "problems")),
      h("span", {}, "version ", health.version),
      h("span", { class: "muted" }, `log at sequence ${status.log_last_seq}, read ${time(status.at)}`),
    ),
    status.problems.length ? h("ul", { id: "problems", class: "message error" }, status.problems.map((p) => h("li", {}, p))) : "",
    status.notes.length ? h("ul", { id: "notes", class: "muted" }, status.notes.map((n) => h("li", {}, n))) : "",
    h("h2", {}, "Services"),
    services(status),
    h("h2", {}, "Consumers"),
    consumers(status),
    h("h2", {}, "Projections"),
    projections(status),
    h("h2", {}, "Dead letters"),
    deadLetters(status),
    h("h2", {}, "Tool sandbox"),
    h("table", { id: "sandbox", class: "kv" }, h("tbody", {}, rows(health.sandbox || {}))),
  );
}

export async function healthView(root, _args, _params, ctx) {
  while (ctx.alive()) {
    const [health, status] = await Promise.all([get("/v1/health/"), get("/v1/operations/status")]);
    if (!ctx.alive()) return;
    render(root, health, status);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}
