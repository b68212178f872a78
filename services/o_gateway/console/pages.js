// A list view a page at a time: the API's keyset cursor (`after` the last row shown) in the
// view's hash, so a page can be bookmarked and the browser's back button goes back a page.

import { h } from "./dom.js";

export const PAGE = 100;

// The page's size: `limit` in the hash (1 to PAGE), else PAGE.
export function pageSize(params) {
  const n = Number(params.get("limit"));
  return Number.isInteger(n) && n >= 1 && n <= PAGE ? n : PAGE;
}

// One page of rows: asks for one row more than it shows, to know whether another page
// follows without counting the list.
export async function onePage(params, fetchRows) {
  const size = pageSize(params);
  const rows = await fetchRows({ after: params.get("after") || "", limit: size + 1 });
  return { rows: rows.slice(0, size), more: rows.length > size };
}

function link(route, params, cls, text) {
  const q = params.toString();
  return h("a", { href: `#/${route}${q ? `?${q}` : ""}`, class: cls }, text);
}

// Links to the first page (on a later one) and to the next (when one follows).
export function pager(route, params, { rows, more }) {
  const links = [];
  if (params.get("after")) {
    const first = new URLSearchParams(params);
    first.delete("after");
    links.push(link(route, first, "first-page", "← First page"));
  }
  if (more && rows.length) {
    const next = new URLSearchParams(params);
    next.set("after", rows[rows.length - 1].id);
    links.push(link(route, next, "next-page", "Next page →"));
  }
  return h("nav", { class: "pager row", "aria-label": "pages" }, links);
}
