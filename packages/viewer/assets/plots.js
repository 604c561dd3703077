// @ts-check
// The leaderboard's plots, drawn as SVG with d3 (vendor-d3.js: d3's own UMD build, shipped in this
// package, so nothing is fetched from another host). Colours, fonts and the background are set on
// the elements, not in app.css, so an exported SVG or PNG looks like the page. Every value goes in
// through d3's .text() / attributes (textContent), never as markup. Each drawn datum has class "mark".

/** @type {any} */
const d3 = /** @type {any} */ (window).d3;

/** Series colours (Tableau 10), the same as proctor report --leaderboard --format html. */
export const COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const AXIS = "#5b6474";
const INK = "#1d2430";

/** @param {number} v */
const pct = (v) => `${Math.round(v * 100)}%`;
/** @param {number} v */
export const usd = (v) => (v === 0 ? "$0" : v >= 1 ? `$${v.toFixed(2)}` : v >= 0.01 ? `$${v.toFixed(3)}` : `$${v.toPrecision(2)}`);

/** Heat map fill: red (none passed) to green (all passed); amber when every attempt errored. @param {number} passed @param {number} attempts @param {number} errored */
export function heatColor(passed, attempts, errored) {
  if (attempts > 0 && errored === attempts) return "#f0b429";
  const t = attempts === 0 ? 0 : passed / attempts;
  const mix = (/** @type {number} */ a, /** @type {number} */ b) => Math.round(a + (b - a) * t);
  return `rgb(${mix(214, 47)},${mix(69, 158)},${mix(65, 68)})`;
}

/** A white SVG of the given size with a title, and its drawing area. @param {number} width @param {number} height @param {string} title */
function canvas(width, height, title) {
  const svg = d3.create("svg").attr("xmlns", "http://www.w3.org/2000/svg").attr("width", width).attr("height", height).attr("viewBox", `0 0 ${width} ${height}`)
    .attr("role", "img").attr("aria-label", title).attr("font-family", "system-ui, sans-serif").attr("font-size", 11).attr("color", AXIS);
  svg.append("rect").attr("width", width).attr("height", height).attr("fill", "#ffffff");
  svg.append("text").attr("x", 8).attr("y", 16).attr("font-size", 13).attr("font-weight", 600).attr("fill", INK).text(title);
  return svg;
}

/** One colour per leaderboard row, the same in every plot. @param {number} i */
const colorOf = (i) => COLORS[i % COLORS.length];

/** @param {any} svg @param {number} x @param {number} y @param {{label: string, color: number}[]} items */
function legend(svg, x, y, items) {
  const g = svg.append("g").attr("class", "legend").attr("transform", `translate(${x},${y})`);
  items.forEach(({ label, color }, i) => {
    g.append("rect").attr("y", i * 16).attr("width", 10).attr("height", 10).attr("fill", colorOf(color));
    g.append("text").attr("x", 14).attr("y", i * 16 + 9).attr("fill", INK).text(label);
  });
}

/** @param {any} svg @param {any} y @param {number} left @param {number} width @param {number} top @param {number} height @param {string} label */
function percentAxis(svg, y, left, width, top, height, label) {
  svg.append("g").attr("transform", `translate(${left},0)`).call(d3.axisLeft(y).ticks(4).tickFormat(d3.format(".0%")).tickSize(-width))
    .call((/** @type {any} */ g) => g.selectAll(".tick line").attr("stroke", "#d9dee7"))
    .call((/** @type {any} */ g) => g.select(".domain").remove());
  svg.append("text").attr("transform", `translate(12,${top + height / 2}) rotate(-90)`).attr("text-anchor", "middle").attr("fill", AXIS).text(label);
}

/**
 * Pass rate against cost per task, one point per agent/model row that has a cost; the Pareto front
 * (no other row as cheap and better) filled and joined by a dashed line.
 * @param {{points: {key:string, label:string, color:number, costPerTask:number, passRate:number, pareto:boolean}[], unpriced: string[]}} cost
 */
export function costPlot(cost) {
  const [W, H, L, T, R, B] = [640, 360, 56, 30, 190, 44];
  const svg = canvas(W, H, "Pass rate vs cost per task (★ Pareto front)");
  const x = d3.scaleLinear().domain([0, (d3.max(cost.points, (/** @type {any} */ p) => p.costPerTask) || 1) * 1.1]).nice().range([L, W - R]);
  const y = d3.scaleLinear().domain([0, 1]).range([H - B, T]);
  percentAxis(svg, y, L, W - L - R, T, H - T - B, "pass rate");
  svg.append("g").attr("transform", `translate(0,${H - B})`).call(d3.axisBottom(x).ticks(5).tickFormat((/** @type {number} */ v) => usd(v)));
  svg.append("text").attr("x", L + (W - L - R) / 2).attr("y", H - 8).attr("text-anchor", "middle").attr("fill", AXIS).text("cost per task (USD)");
  const front = cost.points.filter((p) => p.pareto).sort((a, b) => a.costPerTask - b.costPerTask);
  if (front.length > 1) {
    svg.append("path").attr("class", "pareto").attr("fill", "none").attr("stroke", "#17803d").attr("stroke-width", 1.5).attr("stroke-dasharray", "4 3")
      .attr("d", d3.line().x((/** @type {any} */ p) => x(p.costPerTask)).y((/** @type {any} */ p) => y(p.passRate))(front));
  }
  svg.append("g").selectAll("circle").data(cost.points).join("circle")
    .attr("class", (/** @type {any} */ p) => (p.pareto ? "mark pareto" : "mark"))
    .attr("cx", (/** @type {any} */ p) => x(p.costPerTask)).attr("cy", (/** @type {any} */ p) => y(p.passRate)).attr("r", (/** @type {any} */ p) => (p.pareto ? 6 : 4.5))
    .attr("fill", (/** @type {any} */ p) => (p.pareto ? colorOf(p.color) : "#ffffff"))
    .attr("stroke", (/** @type {any} */ p) => colorOf(p.color)).attr("stroke-width", 2)
    .append("title").text((/** @type {any} */ p) => `${p.label}: ${pct(p.passRate)} at ${usd(p.costPerTask)} per task${p.pareto ? " (Pareto front)" : ""}`);
  legend(svg, W - R + 16, T, cost.points.map((p) => ({ label: `${p.label}${p.pareto ? " ★" : ""}`, color: p.color })));
  if (cost.points.length === 0) svg.append("text").attr("x", L + (W - L - R) / 2).attr("y", T + (H - T - B) / 2).attr("text-anchor", "middle").attr("fill", AXIS).text("no row reports a cost");
  return svg.node();
}

/**
 * Pass rate per category, up to 6 runs side by side (a bar per category and run that has trials).
 * @param {{runs: {runId:string, label:string, color:number}[], categories: string[], values: (number|null)[][]}} c
 */
export function categoryPlot(c) {
  const [L, T, R, B, H] = [56, 30, 190, 60, 320];
  const group = Math.max(24, c.runs.length * 14 + 10);
  const w = Math.max(240, c.categories.length * group);
  const W = L + w + R;
  const svg = canvas(W, H, "Pass rate by category");
  const x0 = d3.scaleBand().domain(c.categories).range([L, L + w]).paddingInner(0.15).paddingOuter(0.05);
  const x1 = d3.scaleBand().domain(c.runs.map((_, i) => String(i))).range([0, x0.bandwidth()]).padding(0.05);
  const y = d3.scaleLinear().domain([0, 1]).range([H - B, T]);
  percentAxis(svg, y, L, w, T, H - T - B, "pass rate");
  svg.append("g").attr("transform", `translate(0,${H - B})`).call(d3.axisBottom(x0).tickSizeOuter(0))
    .selectAll("text").attr("text-anchor", "start").attr("transform", "rotate(30)").attr("dx", 4);
  const bars = c.categories.flatMap((category, ci) => c.runs.map((run, ri) => ({ category, run, ri, value: c.values[ci]?.[ri] ?? null }))).filter((d) => d.value !== null);
  svg.append("g").selectAll("rect").data(bars).join("rect").attr("class", "mark")
    .attr("x", (/** @type {any} */ d) => x0(d.category) + x1(String(d.ri))).attr("width", x1.bandwidth())
    .attr("y", (/** @type {any} */ d) => y(d.value)).attr("height", (/** @type {any} */ d) => y(0) - y(d.value))
    .attr("fill", (/** @type {any} */ d) => colorOf(d.run.color))
    .append("title").text((/** @type {any} */ d) => `${d.run.label} · ${d.category}: ${pct(d.value)}`);
  legend(svg, L + w + 16, T, c.runs);
  return svg.node();
}

/**
 * pass@k against k, one curve per run with more than one attempt per task.
 * @param {{curves: {runId:string, label:string, color:number, points:{k:number, value:number}[]}[]}} p
 */
export function passAtKPlot(p) {
  const [W, H, L, T, R, B] = [640, 320, 56, 30, 190, 44];
  const svg = canvas(W, H, "pass@k");
  const maxK = Math.max(2, d3.max(p.curves.flatMap((c) => c.points.map((q) => q.k))) ?? 2);
  const x = d3.scaleLinear().domain([1, maxK]).range([L, W - R]);
  const y = d3.scaleLinear().domain([0, 1]).range([H - B, T]);
  percentAxis(svg, y, L, W - L - R, T, H - T - B, "pass@k");
  svg.append("g").attr("transform", `translate(0,${H - B})`).call(d3.axisBottom(x).ticks(Math.min(maxK - 1, 10)).tickFormat(d3.format("d")));
  svg.append("text").attr("x", L + (W - L - R) / 2).attr("y", H - 8).attr("text-anchor", "middle").attr("fill", AXIS).text("k (attempts)");
  const line = d3.line().x((/** @type {any} */ q) => x(q.k)).y((/** @type {any} */ q) => y(q.value));
  p.curves.forEach((c) => {
    const color = colorOf(c.color);
    svg.append("path").attr("class", "line").attr("fill", "none").attr("stroke", color).attr("stroke-width", 2).attr("d", line(c.points));
    svg.append("g").selectAll("circle").data(c.points).join("circle").attr("class", "mark").attr("r", 3.5).attr("fill", color)
      .attr("cx", (/** @type {any} */ q) => x(q.k)).attr("cy", (/** @type {any} */ q) => y(q.value))
      .append("title").text((/** @type {any} */ q) => `${c.label}: pass@${q.k} ${pct(q.value)}`);
  });
  legend(svg, W - R + 16, T, p.curves);
  if (p.curves.length === 0) svg.append("text").attr("x", L + (W - L - R) / 2).attr("y", T + (H - T - B) / 2).attr("text-anchor", "middle").attr("fill", AXIS).text("no run has more than one attempt per task");
  return svg.node();
}

/**
 * Tasks (rows) x runs (columns); each cell links to the trial it stands for (the first attempt
 * that did not pass, else the first).
 * @param {{runs: {runId:string, label:string}[], tasks: string[], cells: {task:number, run:number, passed:number, attempts:number, errored:number, trialId:string}[]}} m
 * @param {(runId: string, trialId: string) => string} href
 */
export function heatmapPlot(m, href) {
  const cell = m.tasks.length > 200 ? 6 : 14;
  const L = Math.min(260, 12 + Math.max(8, ...m.tasks.map((t) => t.length)) * 6.2);
  const T = 40 + Math.min(200, Math.max(8, ...m.runs.map((r) => r.label.length)) * 6.2);
  const W = Math.max(520, L + m.runs.length * cell + 20);
  const H = T + m.tasks.length * cell + 20;
  const svg = canvas(W, H, "Per-task outcome (green: passed, red: failed, amber: errored)");
  svg.append("g").selectAll("text").data(m.runs).join("text").attr("fill", AXIS)
    .attr("transform", (/** @type {any} */ _r, /** @type {number} */ i) => `translate(${L + i * cell + cell / 2 + 4},${T - 6}) rotate(-90)`).text((/** @type {any} */ r) => r.label);
  if (cell >= 10) {
    svg.append("g").selectAll("text").data(m.tasks).join("text").attr("fill", AXIS).attr("text-anchor", "end")
      .attr("x", L - 6).attr("y", (/** @type {any} */ _t, /** @type {number} */ i) => T + i * cell + cell - 3).text((/** @type {string} */ t) => t);
  }
  svg.append("g").attr("class", "cells").selectAll("a").data(m.cells).join("a")
    .attr("href", (/** @type {any} */ c) => href(m.runs[c.run].runId, c.trialId))
    .attr("data-task", (/** @type {any} */ c) => m.tasks[c.task]).attr("data-run", (/** @type {any} */ c) => m.runs[c.run].runId)
    .append("rect").attr("class", "mark").attr("x", (/** @type {any} */ c) => L + c.run * cell).attr("y", (/** @type {any} */ c) => T + c.task * cell)
    .attr("width", cell - 1).attr("height", cell - 1).attr("fill", (/** @type {any} */ c) => heatColor(c.passed, c.attempts, c.errored))
    .append("title").text((/** @type {any} */ c) => `${m.tasks[c.task]} · ${m.runs[c.run].label}: ${c.passed}/${c.attempts} passed${c.errored ? `, ${c.errored} errored` : ""}`);
  return svg.node();
}

/** @param {SVGSVGElement} svg */
function svgSource(svg) {
  return `<?xml version="1.0" encoding="UTF-8"?>\n${new XMLSerializer().serializeToString(svg)}`;
}

/** @param {string} name @param {Blob} blob */
function download(name, blob) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

/** The SVG drawn on a canvas at twice its size (a data: URL image: allowed by the viewer's img-src). @param {SVGSVGElement} svg @param {string} name */
function exportPng(svg, name) {
  const width = Number(svg.getAttribute("width"));
  const height = Number(svg.getAttribute("height"));
  const img = new Image();
  img.onload = () => {
    const c = document.createElement("canvas");
    c.width = width * 2;
    c.height = height * 2;
    const ctx = /** @type {CanvasRenderingContext2D} */ (c.getContext("2d"));
    ctx.scale(2, 2);
    ctx.drawImage(img, 0, 0, width, height);
    c.toBlob((blob) => blob && download(`${name}.png`, blob), "image/png");
  };
  img.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(svgSource(svg))}`;
}

/**
 * A plot in a figure with its export buttons (SVG: the markup as drawn; PNG: rendered at 2x).
 * @param {string} id @param {SVGSVGElement} svg @param {string} name file name without extension
 */
export function figure(id, svg, name) {
  const fig = document.createElement("figure");
  fig.id = id;
  fig.className = "plot";
  const bar = document.createElement("div");
  bar.className = "filters";
  for (const [label, go] of /** @type {[string, () => void][]} */ ([
    ["Export SVG", () => download(`${name}.svg`, new Blob([svgSource(svg)], { type: "image/svg+xml" }))],
    ["Export PNG", () => exportPng(svg, name)],
  ])) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.dataset.export = label.slice(7).toLowerCase();
    b.addEventListener("click", go);
    bar.append(b);
  }
  fig.append(svg, bar);
  return fig;
}
