// Agents: the list, searched by name and tags, and a form that creates one.

import { ApiError, get, post, query } from "./api.js";
import { h, replace, say, short, table, time } from "./dom.js";
import { onePage, pager } from "./pages.js";

const NAME = /^[\w '\-]+$/u;
const MODEL = /^[^\s/]+\/\S+$/;

export function tagList(raw) {
  return raw.split(",").map((t) => t.trim()).filter(Boolean);
}

export async function agentsView(root, _args, params) {
  const name = params.get("q") || "";
  const tags = params.get("tags") || "";
  const all = params.get("all") === "1";
  const page = await onePage(params, (at) =>
    get(`/v1/agents/${query({ query_text: name, tags: tagList(tags), match_all_tags: all ? "true" : "", ...at })}`),
  );

  const search = h(
    "form",
    { id: "agent-search", class: "row" },
    h("label", {}, "Name contains ", h("input", { name: "q", value: name, maxlength: 256 })),
    h("label", {}, "Tags ", h("input", { name: "tags", value: tags, placeholder: "a, b" })),
    h("label", {}, h("input", { type: "checkbox", name: "all", checked: all }), " all tags"),
    h("button", { type: "submit" }, "Search"),
  );
  search.addEventListener("submit", (event) => {
    event.preventDefault();
    const f = new FormData(search);
    const wanted = tagList(String(f.get("tags")));
    if (wanted.some((t) => t.length > 256)) return say(search, "A tag is at most 256 characters.");
    const p = new URLSearchParams();
    if (f.get("q")) p.set("q", String(f.get("q")).trim());
    if (wanted.length) p.set("tags", wanted.join(","));
    if (f.get("all")) p.set("all", "1");
    location.hash = `#/agents${p.toString() ? `?${p}` : ""}`;
  });

  replace(
    root,
    h("h1", {}, "Agents"),
    search,
    table(
      [
        ["Name", (a) => h("a", { href: `#/agents/${encodeURIComponent(a.id)}` }, a.name)],
        ["Id", (a) => h("code", {}, short(a.id))],
        ["Model", (a) => a.model || a.llm_config?.handle || "–"],
        ["Tags", (a) => (a.tags || []).map((t) => h("span", { class: "tag" }, t))],
        ["Created", (a) => time(a.created_at)],
      ],
      page.rows,
      { id: "agents" },
    ),
    pager("agents", params, page),
    await createForm(),
  );
}

async function createForm() {
  let models = [];
  try {
    models = (await get("/v1/models/")).map((m) => m.handle).filter(Boolean);
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) throw err;
  }
  const form = h(
    "form",
    { id: "create-agent", class: "card", novalidate: true },
    h("h2", {}, "New agent"),
    h("label", {}, "Name ", h("input", { name: "name", maxlength: 256 })),
    h("label", {}, "Model ", h("input", { name: "model", list: "models", value: models[0] || "", placeholder: "provider/model" })),
    h("datalist", { id: "models" }, models.map((m) => h("option", { value: m }))),
    h("label", {}, "Tags ", h("input", { name: "tags", placeholder: "a, b" })),
    h("label", {}, "Persona ", h("textarea", { name: "persona", rows: 2 }, "I am a helpful assistant.")),
    h("label", {}, "Human ", h("textarea", { name: "human", rows: 2 })),
    h("button", { type: "submit" }, "Create"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const f = new FormData(form);
    const name = String(f.get("name")).trim();
    const model = String(f.get("model")).trim();
    const tags = tagList(String(f.get("tags")));
    if (!name) return say(form, "Give the agent a name.");
    if (!NAME.test(name)) return say(form, "A name holds letters, digits, spaces, _ ' and - only.");
    if (!MODEL.test(model)) return say(form, "A model is a handle: provider/model, e.g. openai/gpt-4o-mini.");
    if (tags.some((t) => t.length > 256)) return say(form, "A tag is at most 256 characters.");
    const blocks = [
      { label: "persona", value: String(f.get("persona")) },
      { label: "human", value: String(f.get("human")) },
    ];
    say(form, "Creating…", "info");
    try {
      const agent = await post("/v1/agents/", { name, model, tags, memory_blocks: blocks });
      location.hash = `#/agents/${encodeURIComponent(agent.id)}`;
    } catch (err) {
      say(form, err.message);
    }
  });
  return form;
}
