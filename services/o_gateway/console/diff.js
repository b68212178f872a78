// A line diff (longest common subsequence) for block versions and agent versions.
// Blocks are a few kilobytes at most, so the quadratic table is small; past LIMIT lines a
// side, the diff falls back to "all removed, all added" rather than hold the tab.

import { h } from "./dom.js";

const LIMIT = 2000;

export function diffLines(before, after) {
  const a = before ? before.split("\n") : [];
  const b = after ? after.split("\n") : [];
  if (a.length > LIMIT || b.length > LIMIT) {
    return [...a.map((text) => ({ op: "-", text })), ...b.map((text) => ({ op: "+", text }))];
  }
  const n = a.length;
  const m = b.length;
  // lcs[i][j]: the common lines of a[i:] and b[j:].
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const ops = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      ops.push({ op: " ", text: a[i] });
      i++;
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
      ops.push({ op: "-", text: a[i++] });
    } else {
      ops.push({ op: "+", text: b[j++] });
    }
  }
  while (i < n) ops.push({ op: "-", text: a[i++] });
  while (j < m) ops.push({ op: "+", text: b[j++] });
  return ops;
}

export function diffView(before, after) {
  const ops = diffLines(before, after);
  const kind = { " ": "same", "-": "removed", "+": "added" };
  return h(
    "pre",
    { class: "diff" },
    ops.map((o) => h("span", { class: kind[o.op] }, `${o.op} ${o.text}\n`)),
  );
}

// A unified diff as the API sends it (o_evolution/patches.py: diff), lines coloured.
export function unifiedView(unified) {
  const kind = (line) => (line.startsWith("+++") || line.startsWith("---") || line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "added" : line.startsWith("-") ? "removed" : "same");
  return h("pre", { class: "diff" }, unified.split("\n").map((line) => h("span", { class: kind(line) }, `${line}\n`)));
}
