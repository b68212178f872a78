// One agent: send it a message, its core blocks (edit, version history as diffs, restore),
// its recent runs and its archival passages (search, insert).

import { get, patch, post, query } from "./api.js";
import { diffView } from "./diff.js";
import { h, replace, say, short, table, time } from "./dom.js";
import { tagList } from "./agents.js";
import { runsTable } from "./runs.js";

const MAX_ARCHIVAL_TOP_K = 100;

export async function agentView(root, [agentId], _params, ctx) {
  const path = `/v1/agents/${encodeURIComponent(agentId)}`;
  const [agent, blocks, runs] = await Promise.all([
    get(path),
    get(`${path}/core-memory/blocks`),
    get(`/v1/runs/${query({ agent_id: agentId, limit: 20 })}`),
  ]);
  const archival = h("section", { id: "archival" });
  replace(
    root,
    h("h1", {}, agent.name, " ", h("code", { class: "muted" }, agent.id)),
    h(
      "p",
      { class: "row" },
      h("span", {}, "Model: ", agent.llm_config?.handle || agent.model || "–"),
      (agent.tags || []).map((t) => h("span", { class: "tag" }, t)),
      h("a", { href: `#/agents/${encodeURIComponent(agentId)}/evolution` }, "Evolution"),
      h("a", { href: `#/runs?agent=${encodeURIComponent(agentId)}` }, "All runs"),
    ),
    messageForm(path),
    h("h2", {}, "Core memory"),
    h("div", { id: "blocks", class: "grid" }, blocks.map((b) => blockCard(path, b, ctx))),
    h("h2", {}, "Recent runs"),
    runsTable(runs),
    archival,
  );
  await archivalSection(archival, path);
}

function messageForm(path) {
  const text = h("textarea", { name: "text", rows: 2, placeholder: "A message from the user" });
  const form = h("form", { id: "send-message", class: "card", novalidate: true }, h("h2", {}, "Send a message"), text, h("button", { type: "submit" }, "Send"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const content = text.value.trim();
    if (!content) return say(form, "Write a message first.");
    say(form, "Sending…", "info");
    try {
      // Async: the run is queued and the console follows it live on its timeline.
      const run = await post(`${path}/messages/async`, { messages: [{ role: "user", content }] });
      location.hash = `#/runs/${encodeURIComponent(run.id)}`;
    } catch (err) {
      say(form, err.message);
    }
  });
  return form;
}

function blockCard(path, block, ctx) {
  const value = h("textarea", { name: "value", rows: 4, readonly: block.read_only }, block.value);
  const count = h("span", { class: "muted" });
  const showCount = () => {
    count.textContent = `${value.value.length} / ${block.limit} characters`;
  };
  value.addEventListener("input", showCount);
  showCount();
  const history = h("div", { class: "history" });
  const form = h(
    "form",
    { class: "card block", "data-label": block.label, novalidate: true },
    h("h3", {}, block.label, " ", h("span", { class: "muted" }, `v${block.version ?? "?"}`)),
    value,
    h("div", { class: "row" }, count, h("button", { type: "submit", disabled: block.read_only }, "Save"), h("button", { type: "button", class: "quiet", onclick: () => toggleHistory() }, "History")),
    history,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (value.value.length > block.limit) {
      return say(form, `The value is ${value.value.length} characters; this block holds at most ${block.limit}.`);
    }
    if (value.value === block.value) return say(form, "Nothing changed.");
    say(form, "Saving…", "info");
    try {
      await patch(`${path}/core-memory/blocks/${encodeURIComponent(block.label)}`, { value: value.value });
      ctx.rerender();
    } catch (err) {
      say(form, err.message);
    }
  });

  async function toggleHistory() {
    if (history.childElementCount) {
      history.replaceChildren();
      return;
    }
    try {
      const versions = await get(`/v1/blocks/${encodeURIComponent(block.id)}/versions`);
      replace(history, versionList(form, block, versions, ctx));
    } catch (err) {
      say(form, err.message);
    }
  }
  return form;
}

function versionList(form, block, versions, ctx) {
  const latest = versions.length ? versions[versions.length - 1].version : null;
  return versions
    .map((v, i) =>
      h(
        "details",
        { class: "version", "data-version": v.version, open: i === versions.length - 1 },
        h(
          "summary",
          {},
          `v${v.version} · ${time(v.created_at)} · ${v.actor || "?"}`,
          v.tool_name ? ` (${v.tool_name})` : "",
          v.restored_from ? ` · restored from v${v.restored_from}` : "",
        ),
        diffView(i ? versions[i - 1].value : "", v.value),
        v.version === latest
          ? h("p", { class: "muted" }, "current")
          : h(
              "button",
              {
                type: "button",
                class: "restore",
                onclick: async () => {
                  say(form, `Restoring v${v.version}…`, "info");
                  try {
                    await post(`/v1/blocks/${encodeURIComponent(block.id)}/versions/${v.version}/restore`);
                    ctx.rerender();
                  } catch (err) {
                    say(form, err.message);
                  }
                },
              },
              `Restore v${v.version}`,
            ),
      ),
    )
    .reverse();
}

async function archivalSection(root, path) {
  const results = h("div", { id: "passages" });
  const search = h(
    "form",
    { id: "archival-search", class: "row", novalidate: true },
    h("input", { name: "query", placeholder: "search by meaning", "aria-label": "archival query" }),
    h("label", {}, "tags ", h("input", { name: "tags", placeholder: "a, b" })),
    h("label", {}, "top ", h("input", { name: "top_k", type: "number", min: 1, max: MAX_ARCHIVAL_TOP_K, value: 10 })),
    h("button", { type: "submit" }, "Search"),
  );
  const insert = h(
    "form",
    { id: "archival-insert", class: "row", novalidate: true },
    h("input", { name: "text", placeholder: "a passage to remember", "aria-label": "passage text" }),
    h("button", { type: "submit" }, "Insert"),
  );
  const show = (rows) =>
    replace(
      results,
      table(
        [
          ["Text", (p) => p.text ?? p.content],
          ["Tags", (p) => (p.tags || []).map((t) => h("span", { class: "tag" }, t))],
          ["Created", (p) => time(p.created_at ?? p.timestamp)],
          ["Id", (p) => h("code", {}, short(p.id))],
        ],
        rows,
      ),
    );
  search.addEventListener("submit", async (event) => {
    event.preventDefault();
    const f = new FormData(search);
    const q = String(f.get("query")).trim();
    const topK = Number(f.get("top_k"));
    if (!q) return say(search, "Write what to search for.");
    if (!Number.isInteger(topK) || topK < 1 || topK > MAX_ARCHIVAL_TOP_K) return say(search, `top is a whole number from 1 to ${MAX_ARCHIVAL_TOP_K}.`);
    try {
      const found = await get(`${path}/archival-memory/search${query({ query: q, tags: tagList(String(f.get("tags"))), top_k: topK })}`);
      say(search, `${found.count} found`, "info");
      show(found.results);
    } catch (err) {
      say(search, err.message);
    }
  });
  insert.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = String(new FormData(insert).get("text")).trim();
    if (!text) return say(insert, "Write the passage first.");
    try {
      await post(`${path}/archival-memory`, { text });
      say(insert, "Inserted.", "info");
      show(await get(`${path}/archival-memory${query({ limit: 50, ascending: "false" })}`));
    } catch (err) {
      say(insert, err.message);
    }
  });
  replace(root, h("h2", {}, "Archival memory"), search, insert, results);
  show(await get(`${path}/archival-memory${query({ limit: 50, ascending: "false" })}`));
}
