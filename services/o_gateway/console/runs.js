// Runs: a list, and one run's timeline (LLM calls, tool calls with durations, stop
// reason, tokens) from GET /v1/runs/{id}/timeline, asked again every POLL_MS while the run
// is in flight.

import { get, query } from "./api.js";
import { waterfall } from "./charts.js";
import { h, ms, replace, short, table, time } from "./dom.js";
import { follow } from "./follow.js";
import { onePage, pager } from "./pages.js";

const POLL_MS = 1000;
const STATUSES = ["created", "running", "completed", "failed", "cancelled"];

export function runsTable(runs) {
  return table(
    [
      ["Run", (r) => h("a", { href: `#/runs/${encodeURIComponent(r.id)}` }, short(r.id))],
      ["Agent", (r) => h("a", { href: `#/agents/${encodeURIComponent(r.agent_id)}` }, short(r.agent_id))],
      ["Status", (r) => h("span", { class: `status ${r.status}` }, r.status)],
      ["Stop reason", (r) => r.stop_reason || "–"],
      ["Created", (r) => time(r.created_at)],
      ["Took", (r) => (r.total_duration_ns ? ms(r.total_duration_ns / 1e6) : "–")],
    ],
    runs,
    { class: "runs" },
  );
}

const IN_FLIGHT = new Set(["created", "running"]);

// The list follows changes: asked again every POLL_MS while it is the first page (where new
// runs appear) or shows a run in flight, until the user leaves the page.
export async function runsView(root, _args, params, ctx) {
  const agent = params.get("agent") || "";
  const status = params.get("status") || "";
  const fetchPage = () => onePage(params, (at) => get(`/v1/runs/${query({ agent_id: agent, statuses: status, ...at })}`));
  const first = !params.get("after");
  const following = (page) => first || page.rows.some((r) => IN_FLIGHT.has(r.status));
  let page = await fetchPage();
  const form = h(
    "form",
    { id: "run-filter", class: "row" },
    h("label", {}, "Agent id ", h("input", { name: "agent", value: agent, placeholder: "agent-…" })),
    h("label", {}, "Status ", h("select", { name: "status" }, h("option", { value: "" }, "any"), STATUSES.map((s) => h("option", { value: s, selected: s === status }, s)))),
    h("button", { type: "submit" }, "Filter"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const f = new FormData(form);
    const p = new URLSearchParams();
    for (const k of ["agent", "status"]) if (String(f.get(k)).trim()) p.set(k, String(f.get(k)).trim());
    location.hash = `#/runs${p.toString() ? `?${p}` : ""}`;
  });
  const live = h("span", { class: "live", id: "runs-live" }, "live");
  const list = h("div", { id: "runs-list" });
  const show = () => {
    live.hidden = !following(page);
    replace(list, runsTable(page.rows), pager("runs", params, page));
  };
  replace(root, h("h1", {}, "Runs ", live), form, list);
  show();
  await follow(ctx, POLL_MS, page, fetchPage, (next) => {
    page = next;
    show();
  }, { more: following });
}

function label(e) {
  if (e.kind === "llm_call") return `step ${e.step_number} LLM ${e.model || ""}`.trim();
  if (e.kind === "tool_call") return `step ${e.step_number} tool ${e.tool_name}`;
  return e.kind;
}

function bars(tl, live) {
  const origin = tl.started_at ? Date.parse(tl.started_at) : null;
  if (origin === null) return [];
  const at = (iso) => (iso ? Date.parse(iso) - origin : null);
  const rows = tl.entries
    .filter((e) => e.kind === "llm_call" || e.kind === "tool_call" || e.kind === "summarized")
    .map((e) => {
      const end = e.kind === "tool_call" ? at(e.ended_at) : at(e.at);
      const start = e.kind === "summarized" ? end - (e.duration_ms || 0) : at(e.started_at);
      return { label: label(e), start: start ?? 0, end, cls: e.kind };
    });
  // In flight with no tool call open: the model is being asked, since the last fact.
  if (live && !rows.some((r) => r.end === null)) {
    const last = tl.entries[tl.entries.length - 1];
    rows.push({ label: "LLM call in progress", start: at(last.at), end: null, cls: "llm_call" });
  }
  return rows;
}

function detail(e) {
  switch (e.kind) {
    case "started":
      return [e.input ? `“${e.input}”` : "", e.messages > 1 ? ` (${e.messages} messages)` : "", e.model ? ` · model ${e.model}` : "", e.version ? ` · canary arm ${e.version.arm}` : ""];
    case "llm_call":
      return [
        `${e.prompt_tokens} + ${e.completion_tokens} = ${e.total_tokens} tokens`,
        e.finish_reason ? ` · ${e.finish_reason}` : "",
        e.tool_calls.length ? ` · calls ${e.tool_calls.join(", ")}` : "",
        e.text ? h("div", { class: "quote" }, e.text) : "",
      ];
    case "tool_call":
      return [h("span", { class: `status ${e.status}` }, e.status), " ", h("code", {}, e.arguments || ""), e.result ? h("div", { class: "quote" }, e.result) : ""];
    case "summarized":
      return `${e.messages_before} → ${e.messages_after} messages in context`;
    case "completed":
      return [`stop reason ${e.stop_reason} · ${e.step_count} steps · ${e.usage.total_tokens} tokens`, e.error ? h("div", { class: "message error" }, e.error) : ""];
    default:
      return "";
  }
}

function render(root, tl) {
  const run = tl.run;
  const live = !tl.complete && (run.status === "created" || run.status === "running");
  const tokens = tl.entries.filter((e) => e.kind === "llm_call").reduce((n, e) => n + e.total_tokens, 0);
  replace(
    root,
    h("h1", {}, "Run ", h("code", {}, run.id)),
    h(
      "p",
      { class: "row", id: "run-summary" },
      h("span", { class: `status ${run.status}` }, run.status),
      live ? h("span", { class: "live" }, "live") : "",
      h("span", {}, "stop reason: ", run.stop_reason || "–"),
      h("span", {}, "tokens: ", String(tokens)),
      h("span", {}, "took: ", ms(tl.duration_ms)),
      h("a", { href: `#/agents/${encodeURIComponent(run.agent_id)}` }, "agent"),
    ),
    // (In flight, the axis runs to now.)
    waterfall(bars(tl, live), live && tl.started_at ? Date.now() - Date.parse(tl.started_at) : tl.duration_ms),
    table(
      [
        ["#", (e) => String(e.seq)],
        ["What", (e) => h("span", { class: `kind ${e.kind}` }, label(e))],
        ["At", (e) => time(e.at)],
        ["Took", (e) => ms(e.duration_ms)],
        ["Detail", (e) => detail(e)],
      ],
      tl.entries,
      { id: "timeline" },
    ),
  );
  return live;
}

export async function runView(root, [runId], _params, ctx) {
  const path = `/v1/runs/${encodeURIComponent(runId)}/timeline`;
  // Follow the run until it ends or the user leaves the page.
  while (ctx.alive()) {
    const tl = await get(path);
    if (!ctx.alive()) return;
    if (!render(root, tl)) return;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}
