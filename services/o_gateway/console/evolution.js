// An agent's evolution (docs/evolution.md): versions as a lineage with diffs, proposals
// with their pair table, slice table and SPRT trace, canaries with their weight over time,
// and the buttons that call the same API as anyone else: approve, reject, promote,
// rollout, abort, rollback.

import { ApiError, get, post } from "./api.js";
import { lineChart } from "./charts.js";
import { diffView, unifiedView } from "./diff.js";
import { h, replace, say, short, table, time } from "./dom.js";
import { editing, follow } from "./follow.js";

// The gate's SPRT bounds with its settings (o_evolution/gate.py: alpha 0.05, beta 0.2):
// accept at ln((1-beta)/alpha), reject at ln(beta/(1-alpha)).
const ALPHA = 0.05;
const BETA = 0.2;
const UPPER = Math.log((1 - BETA) / ALPHA);
const LOWER = Math.log(BETA / (1 - ALPHA));
const MAX_NOTE = 2000;

// The page follows the agent's evolution (an evaluation decided, a canary's steps, a
// promotion or rollback) while it is open, unless a form on it is being filled in.
const POLL_MS = 2000;

export async function evolutionView(root, [agentId], params, ctx) {
  const base = `/v1/agents/${encodeURIComponent(agentId)}/evolution`;
  const chosen = params.get("proposal");
  const read = async () => {
    const [agent, config, versions, proposals, rollouts] = await Promise.all([
      get(`/v1/agents/${encodeURIComponent(agentId)}`),
      get(`${base}/config`),
      get(`${base}/versions`),
      get(`${base}/proposals`),
      get(`${base}/rollouts`),
    ]);
    const proposal = chosen ? await get(`${base}/proposals/${encodeURIComponent(chosen)}`) : null;
    return { agent, config, versions, proposals, rollouts, proposal };
  };
  const show = (data) => render(root, agentId, base, data, ctx);
  const data = await read();
  show(data);
  await follow(ctx, POLL_MS, data, read, show, { held: () => editing(root) });
}

function render(root, agentId, base, { agent, config, versions, proposals, rollouts, proposal }, ctx) {
  replace(
    root,
    h("h1", {}, "Evolution of ", h("a", { href: `#/agents/${encodeURIComponent(agentId)}` }, agent.name)),
    h("p", { class: "row" }, h("span", {}, "enabled: ", String(config.enabled)), h("span", {}, "mode: ", config.mode)),
    h("h2", {}, "Versions"),
    lineage(versions, base, ctx),
    h("h2", {}, "Proposals"),
    table(
      [
        ["Proposal", (p) => h("a", { href: `#/agents/${encodeURIComponent(agentId)}/evolution?proposal=${encodeURIComponent(p.id)}` }, short(p.id))],
        ["Status", (p) => h("span", { class: `status ${p.status}` }, p.status)],
        ["Source", (p) => p.source],
        ["Reason", (p) => p.reason || "–"],
        ["Created", (p) => time(p.created_at)],
      ],
      proposals,
      { id: "proposals" },
    ),
    proposal ? proposalView(proposal, base, ctx) : "",
    h("section", { id: "canaries" }, h("h2", {}, "Canaries"), rollouts.length ? rollouts.map((r) => rolloutView(r, base, ctx)) : h("p", { class: "muted" }, "none")),
  );
}

function act(form, call, ctx) {
  return async () => {
    say(form, "Working…", "info");
    try {
      await call();
      ctx.rerender();
    } catch (err) {
      say(form, err instanceof ApiError ? err.message : String(err));
    }
  };
}

function lineage(data, base, ctx) {
  const byParent = new Map();
  for (const v of data.versions) {
    const key = v.parent_id || "";
    if (!byParent.has(key)) byParent.set(key, []);
    byParent.get(key).push(v);
  }
  const ids = new Set(data.versions.map((v) => v.version_id));
  const specs = new Map(data.versions.map((v) => [v.version_id, v.spec]));
  const form = h("form", { id: "rollback", class: "card", novalidate: true });
  const node = (v) =>
    h(
      "li",
      { "data-version": v.version_id },
      h(
        "details",
        {},
        h("summary", {}, h("code", {}, short(v.version_id)), v.version_id === data.serving ? h("span", { class: "tag serving" }, "serving") : "", ` ${time(v.created_at)}`, v.rationale ? ` · ${v.rationale}` : ""),
        diffView(v.parent_id ? JSON.stringify(specs.get(v.parent_id), null, 2) : "", JSON.stringify(v.spec, null, 2)),
      ),
      children(v.version_id),
    );
  const children = (id) => {
    const kids = byParent.get(id) || [];
    return kids.length ? h("ul", {}, kids.map(node)) : "";
  };
  // Roots: versions whose parent is not listed (the agent's first version).
  const roots = data.versions.filter((v) => !v.parent_id || !ids.has(v.parent_id));
  const select = h("select", { name: "version_id" }, h("option", { value: "" }, "choose a version"), data.versions.map((v) => h("option", { value: v.version_id }, `${short(v.version_id)}${v.version_id === data.serving ? " (serving)" : ""}`)));
  const reason = h("input", { name: "reason", maxlength: MAX_NOTE, placeholder: "why" });
  form.append(h("h3", {}, "Roll back"), select, reason, h("button", { type: "submit" }, "Roll back"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!select.value) return say(form, "Choose the version to serve again.");
    if (select.value === data.serving) return say(form, "That version is already served.");
    if (reason.value.length > MAX_NOTE) return say(form, `A reason is at most ${MAX_NOTE} characters.`);
    act(form, () => post(`${base}/rollback`, { version_id: select.value, reason: reason.value }), ctx)();
  });
  return h("div", {}, data.versions.length ? h("ul", { class: "lineage", id: "lineage" }, roots.map(node)) : h("p", { class: "muted" }, "no versions yet"), data.versions.length ? form : "");
}

function sprtChart(sprt) {
  return lineChart({
    title: "SPRT trace",
    series: [{ name: "llr", points: [[0, 0], ...sprt.map((s) => [s.n, s.llr])], cls: "llr" }],
    lines: [
      { y: UPPER, label: `accept ${UPPER.toFixed(2)}`, cls: "accept" },
      { y: LOWER, label: `reject ${LOWER.toFixed(2)}`, cls: "reject" },
    ],
    xLabel: "decisive cases",
    yLabel: "log-likelihood ratio",
  });
}

function proposalView(p, base, ctx) {
  const report = p.report || {};
  const note = h("input", { name: "note", maxlength: MAX_NOTE, placeholder: "note for the record" });
  const form = h("form", { id: "review", class: "row", novalidate: true }, note);
  const path = `${base}/proposals/${encodeURIComponent(p.id)}`;
  const checked = (call) => () => {
    if (note.value.length > MAX_NOTE) return say(form, `A note is at most ${MAX_NOTE} characters.`);
    return act(form, call, ctx)();
  };
  form.append(
    h("button", { type: "button", onclick: checked(() => post(`${path}/approve`, { note: note.value })) }, "Approve"),
    h("button", { type: "button", onclick: checked(() => post(`${path}/reject`, { note: note.value })) }, "Reject"),
    h("button", { type: "button", onclick: act(form, () => post(`${path}/evaluate`), ctx) }, "Evaluate"),
    h("button", { type: "button", onclick: act(form, () => post(`${path}/rollout`), ctx) }, "Start canary"),
    h("button", { type: "button", onclick: act(form, () => post(`${path}/promote`), ctx) }, "Promote"),
  );
  form.addEventListener("submit", (event) => event.preventDefault());
  return h(
    "section",
    { class: "card", id: "proposal" },
    h("h3", {}, "Proposal ", h("code", {}, p.id), " ", h("span", { class: `status ${p.status}` }, p.status)),
    p.rationale ? h("p", {}, p.rationale) : "",
    p.reason ? h("p", { class: "muted" }, p.reason) : "",
    form,
    h("h4", {}, "Change"),
    p.diff.length
      ? table([["Field", (d) => d.field], ["Diff", (d) => unifiedView(d.unified)]], p.diff, { id: "proposal-diff" })
      : h("pre", {}, JSON.stringify(p.patch, null, 2)),
    h("h4", {}, "Cases"),
    table(
      [
        ["#", (c) => String(c.n)],
        ["Outcome", (c) => h("span", { class: `status ${c.outcome}` }, c.outcome)],
        ["Parent answered", (c) => c.parent?.answer ?? "–"],
        ["Candidate answered", (c) => c.candidate?.answer ?? "–"],
        ["Judge, parent as A", (c) => c.judged_parent_first ?? "–"],
        ["Judge, candidate as A", (c) => c.judged_candidate_first ?? "–"],
        ["Veto", (c) => c.veto || "–"],
      ],
      p.cases,
      { id: "cases" },
    ),
    report.sprt ? [h("h4", {}, "SPRT trace"), sprtChart(report.sprt)] : "",
    report.slices
      ? [
          h("h4", {}, "Slices"),
          table(
            [
              ["Slice", (s) => s.name],
              ["Cases", (s) => String(s.cases)],
              ["Wins", (s) => String(s.wins)],
              ["Losses", (s) => String(s.losses)],
              ["Ties", (s) => String(s.ties)],
              ["p (sign test)", (s) => (s.p_value === null || s.p_value === undefined ? "–" : s.p_value.toFixed(4))],
              ["Regressed", (s) => (s.regressed ? "yes" : "no")],
            ],
            report.slices,
            { id: "slices" },
          ),
        ]
      : "",
    report.decision ? h("p", {}, `Decision: ${report.decision}: ${report.reason}`) : "",
  );
}


function rolloutView(r, base, ctx) {
  const started = Date.parse(r.started_at);
  const points = r.decisions.filter((d) => typeof d.weight === "number").map((d) => [(Date.parse(d.created_at) - started) / 1000, d.weight]);
  // The weight holds until now (running) or until the canary's last change.
  const until = r.status === "running" ? Date.now() : Date.parse(r.updated_at);
  if (points.length && until > started) points.push([(until - started) / 1000, r.status === "running" ? r.weight : points[points.length - 1][1]]);
  const reason = h("input", { name: "reason", maxlength: MAX_NOTE, placeholder: "aborted by an operator" });
  const form = h("form", { class: "row", novalidate: true }, reason);
  if (r.status === "running") {
    form.append(
      h("button", {
        type: "button",
        onclick: () => {
          if (reason.value.length > MAX_NOTE) return say(form, `A reason is at most ${MAX_NOTE} characters.`);
          return act(form, () => post(`${base}/abort`, reason.value ? { reason: reason.value } : {}), ctx)();
        },
      }, "Abort canary"),
    );
  }
  form.addEventListener("submit", (event) => event.preventDefault());
  return h(
    "section",
    { class: "card rollout" },
    h("h3", {}, "Canary ", h("code", {}, short(r.rollout_id)), " ", h("span", { class: `status ${r.status}` }, r.status), ` weight ${r.weight}%`),
    r.reason ? h("p", { class: "muted" }, r.reason) : "",
    points.length ? lineChart({ title: "canary weight", series: [{ name: "weight", points, step: true, cls: "weight" }], xLabel: "seconds since start", yLabel: "weight %" }) : "",
    table(
      [
        ["Decision", (d) => d.type],
        ["Weight", (d) => (d.weight ?? "–").toString()],
        ["Candidate runs/failed", (d) => (d.candidate ? `${d.candidate.runs}/${d.candidate.errors ?? 0}` : "–")],
        ["Stable runs/failed", (d) => (d.stable ? `${d.stable.runs}/${d.stable.errors ?? 0}` : "–")],
        ["Reason", (d) => d.reason || "–"],
        ["At", (d) => time(d.created_at)],
      ],
      r.decisions,
    ),
    r.status === "running" ? form : "",
  );
}
