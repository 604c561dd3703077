import { htmlEscape } from "./html";
import type { LeaderboardPlots } from "./leaderboard";

/**
 * The leaderboard's plots as standalone SVG strings for the HTML report: explicit colours and
 * fonts (no stylesheet needed, so a copied SVG looks the same), every mark with class "mark".
 * The viewer draws the same data with its vendored d3, in the same layout and colours.
 */

/** Series colours (Tableau 10), the viewer's too. */
export const PLOT_COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const FONT = 'font-family="system-ui, sans-serif" font-size="11"';
const AXIS = "#5b6474";

/** Heat map fill: red (none passed) to green (all passed); amber when every attempt errored. */
export function heatColor(passed: number, attempts: number, errored: number): string {
  if (attempts > 0 && errored === attempts) return "#f0b429";
  const t = attempts === 0 ? 0 : passed / attempts;
  const mix = (a: number, b: number) => Math.round(a + (b - a) * t);
  return `rgb(${mix(214, 47)},${mix(69, 158)},${mix(65, 68)})`;
}

/** Round tick values over [0, max]. */
function ticks(max: number, count = 5): number[] {
  if (!(max > 0)) return [0];
  const raw = max / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) ?? raw;
  const out: number[] = [];
  for (let v = 0; v <= max + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

const pct = (v: number) => `${Math.round(v * 100)}%`;
const usd = (v: number) => (v >= 1 ? `$${v.toFixed(2)}` : v >= 0.01 ? `$${v.toFixed(3)}` : `$${v.toPrecision(2)}`);

function frame(width: number, height: number, title: string, body: string[]): string {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="${htmlEscape(title)}" ${FONT}>`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="8" y="16" font-size="13" font-weight="600" fill="#1d2430">${htmlEscape(title)}</text>`,
    ...body,
    "</svg>",
  ].join("\n");
}

/** A y axis from 0 to 100% with grid lines, and an x axis line. */
function percentAxis(left: number, top: number, width: number, height: number, label: string): string[] {
  const out: string[] = [];
  for (const v of [0, 0.25, 0.5, 0.75, 1]) {
    const y = top + height - v * height;
    out.push(`<line x1="${left}" x2="${left + width}" y1="${y}" y2="${y}" stroke="#d9dee7"/>`, `<text x="${left - 6}" y="${y + 4}" text-anchor="end" fill="${AXIS}">${pct(v)}</text>`);
  }
  out.push(`<text transform="translate(12,${top + height / 2}) rotate(-90)" text-anchor="middle" fill="${AXIS}">${htmlEscape(label)}</text>`);
  return out;
}

const colorOf = (i: number) => PLOT_COLORS[i % PLOT_COLORS.length] as string;

function legend(x: number, y: number, items: { label: string; color: number }[]): string[] {
  return items.flatMap(({ label, color }, i) => [
    `<rect x="${x}" y="${y + i * 16}" width="10" height="10" fill="${colorOf(color)}"/>`,
    `<text x="${x + 14}" y="${y + i * 16 + 9}" fill="#1d2430">${htmlEscape(label)}</text>`,
  ]);
}

/** Pass rate against cost per task, the Pareto front drawn as a line through its points. */
export function costSvg(cost: LeaderboardPlots["cost"]): string {
  const [W, H, L, T, R, B] = [640, 360, 56, 30, 170, 44];
  const w = W - L - R;
  const h = H - T - B;
  const maxX = Math.max(0, ...cost.points.map((p) => p.costPerTask)) * 1.1 || 1;
  const xt = ticks(maxX);
  const xMax = Math.max(maxX, xt[xt.length - 1] ?? maxX);
  const x = (v: number) => L + (v / xMax) * w;
  const y = (v: number) => T + h - v * h;
  const body = percentAxis(L, T, w, h, "pass rate");
  for (const v of xt) body.push(`<text x="${x(v)}" y="${T + h + 16}" text-anchor="middle" fill="${AXIS}">${usd(v)}</text>`);
  body.push(`<line x1="${L}" x2="${L + w}" y1="${T + h}" y2="${T + h}" stroke="${AXIS}"/>`, `<text x="${L + w / 2}" y="${H - 8}" text-anchor="middle" fill="${AXIS}">cost per task (USD)</text>`);
  const front = cost.points.filter((p) => p.pareto).sort((a, b) => a.costPerTask - b.costPerTask);
  if (front.length > 1) body.push(`<path class="pareto" d="${front.map((p, i) => `${i ? "L" : "M"}${x(p.costPerTask).toFixed(1)},${y(p.passRate).toFixed(1)}`).join("")}" fill="none" stroke="#17803d" stroke-width="1.5" stroke-dasharray="4 3"/>`);
  cost.points.forEach((p) => {
    const color = colorOf(p.color);
    body.push(
      `<circle class="mark${p.pareto ? " pareto" : ""}" cx="${x(p.costPerTask).toFixed(1)}" cy="${y(p.passRate).toFixed(1)}" r="${p.pareto ? 6 : 4.5}" fill="${p.pareto ? color : "#ffffff"}" stroke="${color}" stroke-width="2"><title>${htmlEscape(`${p.label}: ${pct(p.passRate)} at ${usd(p.costPerTask)} per task${p.pareto ? " (Pareto front)" : ""}`)}</title></circle>`,
    );
  });
  body.push(...legend(L + w + 16, T, cost.points.map((p) => ({ label: `${p.label}${p.pareto ? " ★" : ""}`, color: p.color }))));
  if (cost.points.length === 0) body.push(`<text x="${L + w / 2}" y="${T + h / 2}" text-anchor="middle" fill="${AXIS}">no row reports a cost</text>`);
  return frame(W, H, "Pass rate vs cost per task (★ Pareto front)", body);
}

/** Pass rate per category, up to 6 runs side by side. */
export function categorySvg(c: LeaderboardPlots["categories"]): string {
  const [L, T, R, B] = [56, 30, 190, 60];
  const group = Math.max(24, c.runs.length * 14 + 10);
  const w = Math.max(240, c.categories.length * group);
  const W = L + w + R;
  const H = 320;
  const h = H - T - B;
  const body = percentAxis(L, T, w, h, "pass rate");
  const bar = (group - 10) / Math.max(1, c.runs.length);
  c.categories.forEach((category, ci) => {
    const gx = L + ci * group + 5;
    body.push(`<text transform="translate(${gx + (group - 10) / 2},${T + h + 12}) rotate(30)" fill="${AXIS}">${htmlEscape(category)}</text>`);
    c.runs.forEach((run, ri) => {
      const v = c.values[ci]?.[ri];
      if (v === null || v === undefined) return;
      body.push(
        `<rect class="mark" x="${(gx + ri * bar).toFixed(1)}" y="${(T + h - v * h).toFixed(1)}" width="${Math.max(1, bar - 1).toFixed(1)}" height="${(v * h).toFixed(1)}" fill="${colorOf(run.color)}"><title>${htmlEscape(`${run.label} · ${category}: ${pct(v)}`)}</title></rect>`,
      );
    });
  });
  body.push(`<line x1="${L}" x2="${L + w}" y1="${T + h}" y2="${T + h}" stroke="${AXIS}"/>`);
  body.push(...legend(L + w + 16, T, c.runs));
  return frame(W, H, "Pass rate by category", body);
}

/** pass@k against k, one curve per run with more than one attempt. */
export function passAtKSvg(p: LeaderboardPlots["passAtK"]): string {
  const [W, H, L, T, R, B] = [640, 320, 56, 30, 190, 44];
  const w = W - L - R;
  const h = H - T - B;
  const maxK = Math.max(2, ...p.curves.flatMap((c) => c.points.map((q) => q.k)));
  const x = (k: number) => L + ((k - 1) / (maxK - 1)) * w;
  const y = (v: number) => T + h - v * h;
  const body = percentAxis(L, T, w, h, "pass@k");
  for (let k = 1; k <= maxK; k++) body.push(`<text x="${x(k)}" y="${T + h + 16}" text-anchor="middle" fill="${AXIS}">${k}</text>`);
  body.push(`<line x1="${L}" x2="${L + w}" y1="${T + h}" y2="${T + h}" stroke="${AXIS}"/>`, `<text x="${L + w / 2}" y="${H - 8}" text-anchor="middle" fill="${AXIS}">k (attempts)</text>`);
  p.curves.forEach((c) => {
    const color = colorOf(c.color);
    body.push(`<path class="line" d="${c.points.map((q, j) => `${j ? "L" : "M"}${x(q.k).toFixed(1)},${y(q.value).toFixed(1)}`).join("")}" fill="none" stroke="${color}" stroke-width="2"/>`);
    for (const q of c.points) body.push(`<circle class="mark" cx="${x(q.k).toFixed(1)}" cy="${y(q.value).toFixed(1)}" r="3.5" fill="${color}"><title>${htmlEscape(`${c.label}: pass@${q.k} ${pct(q.value)}`)}</title></circle>`);
  });
  body.push(...legend(L + w + 16, T, p.curves));
  if (p.curves.length === 0) body.push(`<text x="${L + w / 2}" y="${T + h / 2}" text-anchor="middle" fill="${AXIS}">no run has more than one attempt per task</text>`);
  return frame(W, H, "pass@k", body);
}

/** Tasks (rows) x runs (columns); `href(runId, trialId)` links a cell (the report links nothing). */
export function heatmapSvg(m: LeaderboardPlots["heatmap"], href: ((runId: string, trialId: string) => string) | null = null): string {
  const cell = m.tasks.length > 200 ? 6 : 14;
  const L = Math.min(260, 12 + Math.max(8, ...m.tasks.map((t) => t.length)) * 6.2);
  const T = 40 + Math.min(200, Math.max(8, ...m.runs.map((r) => r.label.length)) * 6.2);
  const W = Math.max(520, L + m.runs.length * cell + 20);
  const H = T + m.tasks.length * cell + 20;
  const body: string[] = [];
  m.runs.forEach((r, i) => body.push(`<text transform="translate(${L + i * cell + cell / 2 + 4},${T - 6}) rotate(-90)" fill="${AXIS}">${htmlEscape(r.label)}</text>`));
  if (cell >= 10) m.tasks.forEach((t, i) => body.push(`<text x="${L - 6}" y="${T + i * cell + cell - 3}" text-anchor="end" fill="${AXIS}">${htmlEscape(t)}</text>`));
  for (const c of m.cells) {
    const run = m.runs[c.run] as { runId: string; label: string };
    const rect = `<rect class="mark" x="${L + c.run * cell}" y="${T + c.task * cell}" width="${cell - 1}" height="${cell - 1}" fill="${heatColor(c.passed, c.attempts, c.errored)}"><title>${htmlEscape(`${m.tasks[c.task]} · ${run.label}: ${c.passed}/${c.attempts} passed${c.errored ? `, ${c.errored} errored` : ""}`)}</title></rect>`;
    body.push(href ? `<a href="${htmlEscape(href(run.runId, c.trialId))}">${rect}</a>` : rect);
  }
  return frame(W, H, "Per-task outcome (green: passed, red: failed, amber: errored)", body);
}
