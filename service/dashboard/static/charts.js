// Small SVG charts for the dashboard (no library: the page must work offline).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function svgEl(name, attrs, text) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const step = Math.pow(10, Math.floor(Math.log10(value)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * step >= value) return m * step;
  return 10 * step;
}

// Tableau 10 (Maureen Stone's 2016 redesign): ten hues chosen to stay apart from each
// other, in print and for the common colour-vision deficiencies.
const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

// a colour that stays with a key across refreshes (jobs: many, so some share one)
function colorFor(key) {
  let h = 0;
  for (const ch of String(key)) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return PALETTE[h % PALETTE.length];
}

// key -> colour, a different one for each of up to PALETTE.length keys (in sorted order)
function distinctColors(keys) {
  return Object.fromEntries([...new Set(keys)].sort().map((k, i) => [k, PALETTE[i % PALETTE.length]]));
}

// lines: [{label, color, dash, points: [[x(Date|number), y]]}]
function lineChart(lines, { width = 640, height = 220, xTime = true } = {}) {
  const pad = { l: 52, r: 12, t: 10, b: 26 };
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
  const all = lines.flatMap((l) => l.points);
  if (!all.length) {
    svg.appendChild(svgEl("text", { x: width / 2, y: height / 2, "text-anchor": "middle" }, "no samples yet"));
    return svg;
  }
  const xs = all.map((p) => +p[0]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs) || x0 + 1;
  const yMax = niceMax(Math.max(...all.map((p) => p[1])));
  const sx = (x) => pad.l + ((+x - x0) / (x1 - x0 || 1)) * (width - pad.l - pad.r);
  const sy = (y) => height - pad.b - (y / yMax) * (height - pad.t - pad.b);
  for (let i = 0; i <= 4; i++) {
    const y = (yMax * i) / 4;
    svg.appendChild(svgEl("line", { x1: pad.l, x2: width - pad.r, y1: sy(y), y2: sy(y), stroke: "#eef0f4" }));
    svg.appendChild(svgEl("text", { x: pad.l - 4, y: sy(y) + 3, "text-anchor": "end" }, fmtMib(y)));
  }
  const clock = x1 - x0 < 3600e3 ? { hour: "2-digit", minute: "2-digit", second: "2-digit" } : { hour: "2-digit", minute: "2-digit" };
  const ticks = x1 > x0 ? [[x0, "start"], [(x0 + x1) / 2, "middle"], [x1, "end"]] : [[x0, "start"]];
  for (const [x, anchor] of ticks) {
    const label = xTime ? new Date(x).toLocaleTimeString([], clock) : String(x);
    svg.appendChild(svgEl("text", { x: sx(x), y: height - 8, "text-anchor": anchor }, label));
  }
  for (const line of lines) {
    if (!line.points.length) continue;
    const d = line.points.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
    svg.appendChild(svgEl("path", { d, fill: "none", stroke: line.color, "stroke-width": 2, "stroke-dasharray": line.dash || "" }));
    const [lx, ly] = line.points[line.points.length - 1];  // the latest value, visible even alone
    svg.appendChild(svgEl("circle", { cx: sx(lx), cy: sy(ly), r: 2.5, fill: line.color }));
  }
  return svg;
}

// points: [{x, y, bad, title}]; draws y = x and marks `bad` points red
function scatterChart(points, { width = 420, height = 320, xLabel = "", yLabel = "" } = {}) {
  const pad = { l: 66, r: 24, t: 12, b: 34 };
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
  const max = niceMax(Math.max(1, ...points.flatMap((p) => [p.x, p.y])));
  const sx = (x) => pad.l + (x / max) * (width - pad.l - pad.r);
  const sy = (y) => height - pad.b - (y / max) * (height - pad.t - pad.b);
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    svg.appendChild(svgEl("line", { x1: pad.l, x2: width - pad.r, y1: sy(v), y2: sy(v), stroke: "#eef0f4" }));
    svg.appendChild(svgEl("text", { x: pad.l - 4, y: sy(v) + 3, "text-anchor": "end" }, fmtMib(v)));
    svg.appendChild(svgEl("text", { x: sx(v), y: height - 18, "text-anchor": i === 4 ? "end" : "middle" }, fmtMib(v)));
  }
  svg.appendChild(svgEl("line", { x1: sx(0), y1: sy(0), x2: sx(max), y2: sy(max), stroke: "#9aa1ad", "stroke-dasharray": "4 3" }));
  svg.appendChild(svgEl("text", { x: (width + pad.l) / 2, y: height - 4, "text-anchor": "middle" }, xLabel));
  const yMid = (height - pad.b + pad.t) / 2;  // rotated along the left edge, clear of the ticks
  svg.appendChild(svgEl("text", { x: 10, y: yMid, "text-anchor": "middle", transform: `rotate(-90 10 ${yMid})` }, yLabel));
  for (const p of points) {
    const dot = svgEl("circle", { cx: sx(p.x), cy: sy(p.y), r: 3.5, fill: p.bad ? "#c53030" : "#2f5fd0", "fill-opacity": 0.75 });
    dot.appendChild(svgEl("title", {}, p.title || ""));
    svg.appendChild(dot);
  }
  return svg;
}

function fmtMib(mib) {
  if (mib === null || mib === undefined) return "–";
  if (Math.abs(mib) >= 1024) return (mib / 1024).toFixed(mib >= 10240 ? 0 : 1) + " GiB";
  return Math.round(mib) + " MiB";
}
