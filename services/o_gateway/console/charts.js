// Charts as inline SVG, drawn here: a line chart (SPRT trace, canary weight) and a
// waterfall (a run's LLM and tool calls on a time axis). No library: a few scales and paths.

const NS = "http://www.w3.org/2000/svg";

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function scale(domain, range) {
  const [d0, d1] = domain;
  const [r0, r1] = range;
  const span = d1 - d0 || 1;
  return (v) => r0 + ((v - d0) / span) * (r1 - r0);
}

function fmt(v) {
  return Math.abs(v) >= 100 || Number.isInteger(v) ? String(Math.round(v)) : v.toFixed(2);
}

// series: [{name, points: [[x, y]], cls, step}]; lines: [{y, label, cls}] drawn across.
export function lineChart({ series, lines = [], xLabel = "", yLabel = "", width = 560, height = 220, title = "", xFormat = fmt }) {
  const pad = { left: 48, right: 16, top: 20, bottom: 34 };
  const xs = series.flatMap((se) => se.points.map((p) => p[0]));
  const ys = [...series.flatMap((se) => se.points.map((p) => p[1])), ...lines.map((l) => l.y)];
  const x0 = Math.min(...xs, 0);
  const x1 = Math.max(...xs, 1);
  const y0 = Math.min(...ys, 0);
  const y1 = Math.max(...ys, 1);
  const x = scale([x0, x1], [pad.left, width - pad.right]);
  const y = scale([y0, y1], [height - pad.bottom, pad.top]);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img", "aria-label": title || yLabel });
  if (title) svg.append(s("title", {}, title));
  // Axes with their ends labelled.
  svg.append(
    s("line", { x1: pad.left, y1: y(y0), x2: width - pad.right, y2: y(y0), class: "axis" }),
    s("line", { x1: pad.left, y1: pad.top, x2: pad.left, y2: height - pad.bottom, class: "axis" }),
    s("text", { x: pad.left - 6, y: y(y1) + 4, class: "tick end" }, fmt(y1)),
    s("text", { x: pad.left - 6, y: y(y0) + 4, class: "tick end" }, fmt(y0)),
    s("text", { x: pad.left, y: height - pad.bottom + 16, class: "tick" }, xFormat(x0)),
    s("text", { x: width - pad.right, y: height - pad.bottom + 16, class: "tick end" }, xFormat(x1)),
    s("text", { x: (pad.left + width - pad.right) / 2, y: height - 4, class: "label middle" }, xLabel),
    s("text", { x: 4, y: pad.top - 6, class: "label" }, yLabel),
  );
  if (y0 < 0 && y1 > 0) svg.append(s("line", { x1: pad.left, y1: y(0), x2: width - pad.right, y2: y(0), class: "zero" }));
  for (const l of lines) {
    svg.append(
      s("line", { x1: pad.left, y1: y(l.y), x2: width - pad.right, y2: y(l.y), class: `bound ${l.cls || ""}` }),
      s("text", { x: width - pad.right, y: y(l.y) - 4, class: "tick end" }, l.label),
    );
  }
  for (const se of series) {
    if (!se.points.length) continue;
    let d = "";
    se.points.forEach(([px, py], i) => {
      if (i === 0) d += `M${x(px)},${y(py)}`;
      else if (se.step) d += `H${x(px)}V${y(py)}`;
      else d += `L${x(px)},${y(py)}`;
    });
    svg.append(s("path", { d, class: `series ${se.cls || ""}` }));
    for (const [px, py] of se.points) {
      svg.append(s("circle", { cx: x(px), cy: y(py), r: 3, class: `dot ${se.cls || ""}` }, s("title", {}, `${xFormat(px)}: ${fmt(py)}`)));
    }
  }
  return svg;
}

// rows: [{label, start, end, cls}] in ms from the run's start (end null: still going).
export function waterfall(rows, total, width = 720) {
  const rowH = 22;
  const pad = { left: 190, right: 70, top: 8, bottom: 24 };
  const height = pad.top + pad.bottom + rowH * Math.max(rows.length, 1);
  const end = Math.max(total || 0, ...rows.map((r) => r.end ?? r.start), 1);
  const x = scale([0, end], [pad.left, width - pad.right]);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart waterfall", role: "img", "aria-label": "run timeline" });
  rows.forEach((r, i) => {
    const top = pad.top + i * rowH;
    const barEnd = r.end ?? end;
    svg.append(
      s("text", { x: pad.left - 8, y: top + 15, class: "tick end" }, r.label),
      s("rect", {
        x: x(r.start),
        y: top + 4,
        width: Math.max(x(barEnd) - x(r.start), 2),
        height: rowH - 8,
        class: `bar ${r.cls || ""}${r.end === null ? " open" : ""}`,
      }, s("title", {}, `${r.label}: ${r.end === null ? "in progress" : `${(r.end - r.start).toFixed(1)} ms`}`)),
      s("text", { x: x(barEnd) + 4, y: top + 15, class: "tick" }, r.end === null ? "…" : `${(r.end - r.start).toFixed(0)} ms`),
    );
  });
  svg.append(
    s("line", { x1: pad.left, y1: height - pad.bottom, x2: width - pad.right, y2: height - pad.bottom, class: "axis" }),
    s("text", { x: pad.left, y: height - 6, class: "tick" }, "0"),
    s("text", { x: width - pad.right, y: height - 6, class: "tick end" }, `${end.toFixed(0)} ms`),
  );
  return svg;
}
