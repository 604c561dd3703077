// @ts-check
// Proctor viewer: plain DOM, no framework, no build step. Every value from a run goes in through
// textContent (never innerHTML), so task ids and logs cannot inject markup. Every URL is relative
// (api/..., ws), so the same app runs at / (proctor view) and under the server's /ui/.

import { categoryPlot, costPlot, figure, heatmapPlot, passAtKPlot, usd as shortUsd } from "./plots.js";

const app = /** @type {HTMLElement} */ (document.getElementById("app"));
const crumbs = /** @type {HTMLElement} */ (document.getElementById("crumbs"));
const live = /** @type {HTMLElement} */ (document.getElementById("live"));
const who = /** @type {HTMLElement} */ (document.getElementById("session"));
const PAGE = 50;
/** Bytes of a log shown first (its tail); "load earlier" fetches the chunk before. */
const TAIL = 64 * 1024;

/**
 * @param {string} tag
 * @param {Record<string, any>} [attrs]
 * @param {...(Node | string | number | null | undefined | false)[] | Node | string | number | null | undefined | false} children
 * @returns {HTMLElement}
 */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "value") /** @type {HTMLInputElement} */ (el).value = v;
    else if (k === "checked") /** @type {HTMLInputElement} */ (el).checked = v;
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === "string" || typeof c === "number" ? String(c) : c);
  }
  return el;
}

/** Replaces the page's content; arrays are flattened, null/false left out. @param {...any} children */
function show(...children) {
  app.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

/** Thrown when the session is missing or expired: the page shows the login form. */
class SignedOut extends Error {}

/** @param {string} path relative to the app (no leading slash) */
async function api(path) {
  const res = await fetch(path, { headers: { accept: "application/json" }, credentials: "same-origin" });
  const body = await res.json();
  if (res.status === 401) throw new SignedOut(body.message || "sign in");
  if (!res.ok) throw new Error(body.message || `${res.status} ${path}`);
  return body;
}

/** @param {number | null | undefined} v */
const pct = (v) => (v === null || v === undefined ? "-" : `${(v * 100).toFixed(1)}%`);
/** @param {number | null | undefined} v @param {number} [d] */
const fix = (v, d = 3) => (v === null || v === undefined ? "-" : v.toFixed(d));
/** @param {number | null | undefined} v USD with four decimals; "-" when there is none (unpriced, or nothing to divide by) */
const usd = (v) => (v === null || v === undefined ? "-" : `$${v !== 0 && Math.abs(v) < 0.01 ? v.toFixed(6) : v.toFixed(4)}`);
/** @param {number} ms */
function dur(ms) {
  if (!Number.isFinite(ms) || ms < 0) return "-";
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, "0")}m`;
}
/** @param {{low:number, high:number} | null | undefined} ci */
const ciText = (ci) => (ci ? ` [${pct(ci.low)}, ${pct(ci.high)}]` : "");
const enc = encodeURIComponent;

/**
 * @param {string[]} header
 * @param {(Node|string)[][]} rows
 * @param {number[]} [numeric]
 */
function table(header, rows, numeric = []) {
  return h(
    "table",
    {},
    h("thead", {}, h("tr", {}, header.map((x, i) => h("th", { class: numeric.includes(i) ? "n" : null }, x)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) => h("td", { class: numeric.includes(i) ? "n" : typeof c === "string" && ["passed", "failed", "error"].includes(c) ? c : null }, c))))),
  );
}

/** @param {[string, string][]} links */
function setCrumbs(links) {
  crumbs.replaceChildren(...links.flatMap(([text, href], i) => [i > 0 ? " / " : "", href ? h("a", { href }, text) : h("span", {}, text)]));
}

/** @param {{passed:number, failed:number, errored:number, planned:number}} t */
function progressBar(t) {
  const total = Math.max(t.planned, t.passed + t.failed + t.errored, 1);
  const seg = (/** @type {string} */ cls, /** @type {number} */ n) => {
    const s = h("span", { class: cls, title: `${n}` });
    s.style.width = `${(100 * n) / total}%`;
    return s;
  };
  return h("div", { class: "bar", role: "progressbar", "aria-valuenow": t.passed + t.failed + t.errored, "aria-valuemax": t.planned }, seg("p", t.passed), seg("f", t.failed), seg("e", t.errored));
}

// ---- pages ---------------------------------------------------------------------------------

/** @type {Set<string>} */
const ticked = new Set();

async function runsPage() {
  setCrumbs([["runs", ""]]);
  const { runs } = await api("api/runs");
  const compare = /** @type {HTMLButtonElement} */ (h("button", { id: "compare", disabled: ticked.size !== 2, onclick: () => {
    const [a, b] = [...ticked];
    location.hash = `#/compare/${enc(a)}/${enc(b)}`;
  } }, "Compare"));
  const rows = runs.map((/** @type {any} */ r) => [
    h("input", { type: "checkbox", "aria-label": `select ${r.runId}`, checked: ticked.has(r.runId), onchange: (/** @type {Event} */ e) => {
      if (/** @type {HTMLInputElement} */ (e.target).checked) ticked.add(r.runId);
      else ticked.delete(r.runId);
      compare.disabled = ticked.size !== 2;
    } }),
    h("a", { href: `#/run/${enc(r.runId)}` }, r.runId),
    r.agent,
    r.model ?? "-",
    r.dataset ?? "-",
    String(r.tasks),
    `${pct(r.passRate)}${ciText(r.passRateCi)}`,
    `${r.trials.finished}/${r.trials.planned}`,
    dur(r.durationMs),
    r.status,
  ]);
  show(
    h("h1", {}, "Runs"),
    runs.length === 0 ? h("p", { class: "muted" }, "No runs found yet. Start one with proctor run; it appears here live.") : table(["", "run", "agent", "model", "dataset", "tasks", "pass rate [95% CI]", "trials", "duration", "status"], rows, [5, 6, 7, 8]),
    h("div", { class: "filters" }, compare, h("span", { class: "muted" }, "tick two runs to compare them")),
  );
}

/** @type {{status:string, category:string, kind:string, q:string, sort:string, offset:number}} */
let filters = { status: "", category: "", kind: "", q: "", sort: "taskId", offset: 0 };
let filtersFor = "";

/** @param {string} runId */
async function runPage(runId) {
  if (filtersFor !== runId) {
    filters = { status: "", category: "", kind: "", q: "", sort: "taskId", offset: 0 };
    filtersFor = runId;
  }
  setCrumbs([["runs", "#/"], [runId, ""]]);
  const qs = new URLSearchParams({ status: filters.status, category: filters.category, kind: filters.kind, q: filters.q, sort: filters.sort, offset: String(filters.offset), limit: String(PAGE) });
  const [run, page] = await Promise.all([api(`api/runs/${enc(runId)}`), api(`api/runs/${enc(runId)}/trials?${qs}`)]);
  const t = run.trials;
  const rerender = () => route();
  /** @param {keyof typeof filters} key @param {string[]} values @param {string} label */
  const select = (key, values, label) =>
    h("select", { "aria-label": label, name: key, onchange: (/** @type {Event} */ e) => {
      /** @type {any} */ (filters)[key] = /** @type {HTMLSelectElement} */ (e.target).value;
      filters.offset = 0;
      rerender();
    } }, values.map((v) => h("option", { value: v, ...(String(filters[key]) === v ? { selected: "" } : {}) }, v === "" ? `any ${label}` : v)));
  let searchTimer = 0;
  const search = h("input", { type: "search", placeholder: "search task id", "aria-label": "search task id", value: filters.q, oninput: (/** @type {Event} */ e) => {
    clearTimeout(searchTimer);
    const value = /** @type {HTMLInputElement} */ (e.target).value;
    searchTimer = window.setTimeout(() => {
      filters.q = value;
      filters.offset = 0;
      rerender().then(() => /** @type {HTMLInputElement | null} */ (document.querySelector("input[type=search]"))?.focus());
    }, 250);
  } });
  const last = Math.min(page.total, filters.offset + PAGE);
  show(
    h("h1", {}, `Run ${run.runId}`),
    h("p", { class: "muted" }, [run.agent, run.model, run.status, dur(run.durationMs), run.owner ? `submitted by ${run.owner}` : null, run.dir].filter(Boolean).join(" · ")),
    progressBar({ ...t, planned: t.planned }),
    h("div", { class: "cards", id: "counts" },
      h("div", { class: "card" }, h("b", { id: "finished" }, `${t.finished}/${t.planned}`), "finished"),
      h("div", { class: "card passed" }, h("b", { id: "passed" }, String(t.passed)), "passed"),
      h("div", { class: "card failed" }, h("b", { id: "failed" }, String(t.failed)), "failed"),
      h("div", { class: "card error" }, h("b", { id: "errored" }, String(t.errored)), "errored"),
      h("div", { class: "card" }, h("b", {}, pct(run.passRate)), `pass rate${ciText(run.passRateCi)}`),
      h("div", { class: "card" }, h("b", {}, fix(run.meanReward.mean)), `mean reward ± ${fix(run.meanReward.standardError)} SE (${run.meanReward.n} tasks)`),
    ),
    run.cost ? h("div", { class: "cards", id: "cost" },
      h("div", { class: "card" }, h("b", {}, usd(run.cost.totalUsd)), run.cost.unpricedTrials ? `cost (${run.cost.unpricedTrials} trials unpriced)` : "cost"),
      h("div", { class: "card" }, h("b", {}, usd(run.cost.perTrialUsd)), "per trial"),
      h("div", { class: "card" }, h("b", {}, usd(run.cost.perPassUsd)), "per pass"),
      run.cost.computeUsd !== null ? h("div", { class: "card" }, h("b", {}, usd(run.cost.computeUsd)), `compute (${fix(run.cost.cpuSeconds)} CPU-s)`) : null,
    ) : null,
    run.cost ? h("p", { class: "muted" }, run.cost.source ? `prices from ${run.cost.source.name === "price-table" ? run.cost.source.version : `${run.cost.source.name} ${run.cost.source.version}`}` : "", run.cost.unpricedReasons.length ? ` · unpriced: ${run.cost.unpricedReasons[0]}` : "") : null,
    run.budget?.exhausted ? h("p", { id: "budget" }, `Budget spent (${run.budget.exhausted}): ${run.budget.notRun} trials not run, not counted as failures.`) : null,
    run.passAtK.length ? h("p", {}, run.passAtK.map((/** @type {any} */ p) => `pass@${p.k} ${pct(p.value)} (${p.tasks} tasks)`).join(" · "), h("span", { class: "muted" }, " — unbiased estimator")) : null,
    h("h2", {}, "By category"),
    table(["category", "trials", "passed", "failed", "errored", "pass rate"], run.byCategory.map((/** @type {any} */ c) => [c.category, String(c.total), String(c.passed), String(c.failed), String(c.errored), pct(c.passRate)]), [1, 2, 3, 4, 5]),
    Object.keys(run.errorsByKind).length ? h("p", {}, "Errors by kind: ", Object.entries(run.errorsByKind).map(([k, n]) => `${k} ${n}`).join(", ")) : null,
    h("h2", {}, "Trials"),
    h("div", { class: "filters" },
      select("status", ["", "passed", "failed", "error"], "status"),
      select("category", ["", ...run.categories], "category"),
      select("kind", ["", "infra", "setup", "agent", "verifier"], "error kind"),
      search,
      select("sort", ["taskId", "status", "-durationMs", "durationMs", "-reward", "-finishedAt"], "sort"),
    ),
    table(
      ["trial", "status", "reward", "error kind", "reason", "duration", ...(run.cost ? ["cost"] : [])],
      page.trials.map((/** @type {any} */ r) => [h("a", { href: `#/run/${enc(runId)}/trial/${enc(r.trialId)}` }, r.trialId), r.status, r.reward === null ? "-" : String(r.reward), r.errorKind ?? "-", r.reason || "", dur(r.durationMs), ...(run.cost ? [r.costUsd === null ? "unpriced" : usd(r.costUsd)] : [])]),
      [2, 5, 6],
    ),
    h("div", { class: "pager" },
      h("button", { disabled: filters.offset === 0, onclick: () => { filters.offset = Math.max(0, filters.offset - PAGE); rerender(); } }, "← previous"),
      h("span", { id: "page-info" }, page.total === 0 ? "no trials match" : `${filters.offset + 1}–${last} of ${page.total}`),
      h("button", { disabled: last >= page.total, onclick: () => { filters.offset += PAGE; rerender(); } }, "next →"),
    ),
  );
}

/**
 * A log viewer that shows the tail first (where a failure usually is) and loads earlier chunks on
 * request; only the chunks asked for are read on the server. `autoload` false: nothing is read
 * until the button is clicked (a trial with many files).
 * @param {string} runId @param {string} trialId @param {string} name @param {number} size @param {boolean} [autoload]
 */
function logBlock(runId, trialId, name, size, autoload = true) {
  const pre = h("pre", { "data-file": name }, "");
  const more = /** @type {HTMLButtonElement} */ (h("button", { "data-more": name }, `load ${name}`));
  /** Byte where the text shown starts; null until the tail is loaded, 0 when everything is shown. */
  let start = /** @type {number | null} */ (null);
  const load = async () => {
    if (start === 0) return;
    more.disabled = true;
    const chunk = await api(`api/runs/${enc(runId)}/trials/${enc(trialId)}/file?name=${enc(name)}&limit=${TAIL}${start === null ? "" : `&end=${start}`}`);
    pre.prepend(chunk.text);
    if (start === null) pre.scrollTop = pre.scrollHeight;
    start = chunk.start;
    const shown = chunk.size - chunk.start;
    more.textContent = chunk.prev === null ? "all shown" : `load earlier (${Math.round(shown / 1024)} of ${Math.round(chunk.size / 1024)} KiB shown)`;
    more.disabled = chunk.prev === null;
  };
  more.addEventListener("click", () => void load().catch(fail));
  // The tail loads at once; earlier parts wait for a click.
  if (autoload) void load().catch(fail);
  return h("div", {}, h("h3", {}, `${name} `, h("span", { class: "muted" }, `${size} bytes`)), pre, more);
}

/** Files shown with their tails at once on a trial page; the rest load on a click. */
const SANDBOX_AUTOLOAD = 10;

/**
 * What processes in the sandbox wrote to /logs (the task's tests: logs/verifier/..., the agent:
 * logs/agent/...), apart from Proctor's own captures above, with the log cap's cuts.
 * @param {string} runId @param {string} trialId
 * @param {{ files: { name: string, size: number }[], omitted: number, truncated: { dir: string, note: string }[] } | undefined} s
 */
function sandboxFilesBlock(runId, trialId, s) {
  if (!s) return null;
  return h("section", { id: "sandbox-files" },
    h("h2", {}, "Files the sandbox wrote"),
    h("p", { class: "muted" }, "Written to /logs by processes in the sandbox (the task's tests, the agent), not by Proctor: read them as the sandbox's word."),
    s.truncated.map((c) => h("p", { class: "error truncated", "data-dir": c.dir }, h("b", {}, `${c.dir} is incomplete: `), c.note || "the log cap cut it")),
    s.files.length === 0 ? h("p", { class: "muted" }, "the sandbox wrote no files to /logs") : null,
    s.files.map((f, i) => logBlock(runId, trialId, f.name, f.size, i < SANDBOX_AUTOLOAD)),
    s.omitted > 0 ? h("p", { class: "muted" }, `and ${s.omitted} more file(s), not listed`) : null);
}

/** @param {unknown} value */
function asText(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

/**
 * ATIF steps (the llm agent's and the model proxy's trajectory.json): who spoke, the message,
 * each tool call with its arguments and, under it, that call's output; plain chat messages too.
 * @param {any} trajectory
 */
function trajectoryBlock(trajectory) {
  const steps = Array.isArray(trajectory?.steps) ? trajectory.steps : Array.isArray(trajectory?.messages) ? trajectory.messages : Array.isArray(trajectory) ? trajectory : null;
  if (!steps) return h("pre", {}, asText(trajectory));
  return h("div", { id: "trajectory" }, steps.map((/** @type {any} */ s, /** @type {number} */ i) => {
    const results = Array.isArray(s.observation?.results) ? s.observation.results : null;
    const outputOf = (/** @type {string} */ id) => results?.find((/** @type {any} */ r) => r.source_call_id === id);
    const calls = (s.tool_calls ?? []).map((/** @type {any} */ c) => {
      const name = c.function_name ?? c.function?.name ?? c.name ?? "tool";
      const args = c.arguments ?? c.function?.arguments;
      const output = c.tool_call_id ? outputOf(c.tool_call_id) : undefined;
      return h("div", { class: "call" },
        h("pre", { class: "tool-call" }, `→ ${name}(${typeof args === "string" ? args : JSON.stringify(args)})`),
        output ? h("pre", { class: "tool-output" }, asText(output.content)) : null);
    });
    const matched = new Set((s.tool_calls ?? []).map((/** @type {any} */ c) => c.tool_call_id));
    const unmatched = results ? results.filter((/** @type {any} */ r) => !matched.has(r.source_call_id)) : s.observation ? [{ content: s.observation }] : [];
    const tokens = s.metrics ? ` · ${s.metrics.prompt_tokens} in / ${s.metrics.completion_tokens} out tokens` : "";
    const text = s.message ?? s.content;
    return h("div", { class: "turn" },
      h("b", {}, `${s.step_id ?? i + 1}. ${s.source ?? s.role ?? "step"}`), h("span", { class: "muted" }, tokens),
      text ? h("pre", {}, asText(text)) : null,
      calls,
      unmatched.map((/** @type {any} */ r) => h("pre", { class: "tool-output" }, asText(r.content))));
  }));
}

/** @param {string} runId @param {string} trialId */
async function trialPage(runId, trialId) {
  setCrumbs([["runs", "#/"], [runId, `#/run/${enc(runId)}`], [trialId, ""]]);
  const t = await api(`api/runs/${enc(runId)}/trials/${enc(trialId)}`);
  const r = t.result;
  const facts = [
    ["task", r.taskId], ["attempt", String(r.attempt)], ["category", r.category ?? "-"], ["status", r.status],
    ["reward", r.reward === null ? "-" : String(r.reward)], ["duration", dur(r.durationMs)], ["retries", String(r.retries)],
    ["agent", r.agent ? `${r.agent.name ?? ""}${r.agent.model ? ` (${r.agent.model})` : ""} exit ${r.agent.exitCode ?? "-"}${r.agent.timedOut ? ", timed out" : ""}` : "-"],
  ];
  if (r.worker) facts.push(["worker", `${r.worker.name} on ${r.worker.host}`]);
  if (r.error) facts.push(["error", `${r.error.kind}: ${r.error.message}`]);
  if (r.agent?.usage) facts.push(["usage", `${r.agent.usage.inputTokens} in / ${r.agent.usage.outputTokens} out tokens, ${r.agent.usage.requests} requests`]);
  if (r.agent?.usage) facts.push(["cost", r.agent.usage.costUsd !== undefined ? `${usd(r.agent.usage.costUsd)}${r.agent.usage.pricedAs ? ` (${r.agent.usage.pricedAs})` : ""}` : `unpriced${r.agent.usage.unpriced ? `: ${r.agent.usage.unpriced}` : ""}`]);
  if (r.compute) facts.push(["compute", `${r.compute.cpuSeconds === null ? "-" : fix(r.compute.cpuSeconds)} CPU-s${r.compute.costUsd !== undefined ? `, ${usd(r.compute.costUsd)}` : ""}`]);
  const integ = r.integrity;
  let trajectory = null;
  if (t.files["agent/trajectory.json"] !== undefined && t.files["agent/trajectory.json"] <= 4 * 1024 * 1024) {
    const chunks = [];
    let next = 0;
    while (next !== null) {
      const c = await api(`api/runs/${enc(runId)}/trials/${enc(trialId)}/file?name=agent/trajectory.json&offset=${next}`);
      chunks.push(c.text);
      next = c.next;
    }
    try { trajectory = JSON.parse(chunks.join("")); } catch { trajectory = chunks.join(""); }
  }
  show(
    h("h1", {}, `Trial ${r.trialId}`, " ", h("span", { class: r.status }, r.status)),
    // What failed first, before everything else: the test or check and its message.
    t.failure ? h("p", { id: "first-failure", class: "error" }, h("b", {}, "First failure: "), h("code", {}, t.failure.name), ` — ${t.failure.message}`) : null,
    h("dl", {}, facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", { class: k === "status" ? v : null }, v)])),
    t.reason ? h("p", { id: "reason" }, h("b", {}, "Why: "), t.reason) : null,
    h("h2", {}, "Phase timings"),
    table(["phase", "duration"], r.phases.map((/** @type {any} */ p) => [p.phase, dur(p.durationMs)]), [1]),
    r.checks ? h("h2", {}, "Checks") : null,
    r.checks ? table(["check", "result", "exit code", "output"], r.checks.map((/** @type {any} */ c) => [c.name, c.passed ? "passed" : "failed", c.exitCode === null ? "-" : String(c.exitCode), h("pre", {}, c.output)]), [2]) : null,
    h("h2", {}, "Integrity"),
    integ
      ? h("dl", {},
          h("dt", {}, "isolation"), h("dd", {}, integ.isolation),
          h("dt", {}, "tamper checked"), h("dd", {}, String(integ.tamperChecked)),
          h("dt", {}, "tampered"), h("dd", { class: integ.tampered.length ? "error" : null }, integ.tampered.length ? integ.tampered.join(", ") : "none"),
          h("dt", {}, "survivors"), h("dd", { class: integ.survivors.length ? "error" : null }, integ.survivors.length ? integ.survivors.map((/** @type {any} */ s) => `${s.pid} ${s.command}${s.ports.length ? ` :${s.ports.join(",")}` : ""}`).join("; ") : "none"),
          h("dt", {}, "flagged"), h("dd", {}, String(integ.flagged)),
          integ.note ? [h("dt", {}, "note"), h("dd", {}, integ.note)] : null)
      : h("p", { class: "muted" }, "not recorded"),
    h("h2", {}, "Instruction"),
    t.instruction !== null ? h("pre", { id: "instruction" }, t.instruction) : h("p", { class: "muted" }, "instruction.md not found beside the run's sources"),
    trajectory !== null ? [h("h2", {}, "Trajectory"), trajectoryBlock(trajectory)] : null,
    h("h2", {}, "Logs"),
    Object.entries(t.files).filter(([name]) => name !== "agent/trajectory.json").map(([name, size]) => logBlock(runId, trialId, name, /** @type {number} */ (size))),
    Object.keys(t.files).length === 0 ? h("p", { class: "muted" }, "no logs recorded") : null,
    sandboxFilesBlock(runId, trialId, t.sandboxFiles),
    t.trialDir ? h("p", { class: "muted" }, t.trialDir) : null,
  );
}

/** @param {string} a @param {string} b */
async function comparePage(a, b) {
  setCrumbs([["runs", "#/"], [`compare ${a} / ${b}`, ""]]);
  const c = await api(`api/compare?a=${enc(a)}&b=${enc(b)}`);
  const k = c.comparison;
  const d = k.rewardDifference;
  show(
    h("h1", {}, `Compare B ${b} against A ${a}`),
    c.pinsDiffer && c.pinsDiffer.length ? h("p", { id: "pins-warning", class: "error" }, `warning: pins differ: ${c.pinsDiffer.join(", ")}`) : null,
    table(["", "A", "B"], [
      ["run", h("a", { href: `#/run/${enc(a)}` }, a), h("a", { href: `#/run/${enc(b)}` }, b)],
      ["agent", c.a.agent, c.b.agent],
      ["pass rate (paired trials)", pct(k.passRate.a), pct(k.passRate.b)],
      ["mean reward (common tasks)", `${fix(k.meanReward.a.mean)} ± ${fix(k.meanReward.a.standardError)}`, `${fix(k.meanReward.b.mean)} ± ${fix(k.meanReward.b.standardError)}`],
    ]),
    h("dl", { id: "stats" },
      h("dt", {}, "common tasks"), h("dd", {}, `${k.commonTasks}${k.onlyInA.length ? ` · only in A: ${k.onlyInA.length}` : ""}${k.onlyInB.length ? ` · only in B: ${k.onlyInB.length}` : ""}`),
      h("dt", {}, "flips"), h("dd", {}, `${k.mcnemar.failToPass} fail → pass, ${k.mcnemar.passToFail} pass → fail`),
      h("dt", {}, "McNemar"), h("dd", {}, `p = ${k.mcnemar.pValue.toFixed(4)} (${k.mcnemar.passToFail + k.mcnemar.failToPass} discordant of ${k.mcnemar.pairs} pairs; exact two-sided)`),
      d ? [h("dt", {}, "reward B − A"), h("dd", {}, `${fix(d.estimate)} [${fix(d.low)}, ${fix(d.high)}] 95% CI, p = ${d.pValue.toFixed(4)} (paired bootstrap over ${d.n} tasks)`)] : null,
      h("dt", {}, "test to read"), h("dd", {}, k.binary ? "McNemar (binary rewards)" : "paired bootstrap (continuous rewards)"),
    ),
    h("h2", {}, `Flips (${k.flips.length})`),
    k.flips.length ? table(["task", "attempt", "flip", "A", "B"], k.flips.map((/** @type {any} */ f) => [f.taskId, String(f.attempt), f.kind === "fail_to_pass" ? "fail → pass" : "pass → fail", f.from, f.to]), [1]) : h("p", { class: "muted" }, "no task changed outcome"),
    h("h2", {}, "Per task"),
    table(["task", "A pass rate", "B pass rate", "A reward", "B reward", "Δ reward"], k.tasks.map((/** @type {any} */ t) => [t.taskId, pct(t.a.passRate), pct(t.b.passRate), fix(t.a.meanReward), fix(t.b.meanReward), fix(t.rewardDelta)]), [1, 2, 3, 4, 5]),
  );
}

// ---- leaderboard and plots -----------------------------------------------------------------------

/** @param {number | null} v */
const money = (v) => (v === null || v === undefined ? "—" : shortUsd(v));
/** @param {number | null} v */
function tokens(v) {
  if (v === null || v === undefined) return "—";
  if (v < 1000) return String(Math.round(v));
  return v < 1e6 ? `${(v / 1e3).toFixed(v < 1e4 ? 2 : 1)}k` : `${(v / 1e6).toFixed(2)}M`;
}

/** A dataset group's rows: one per agent + model, best pass rate first. @param {any} g */
function boardTable(g) {
  const header = ["#", "agent", "model", "pass rate [95% CI]", "pass@k", "cost/task", "tokens/task", "median trial", "trials", "runs", "comparable"];
  const numeric = [0, 3, 5, 6, 7, 8];
  return h("table", { class: "board", "data-dataset": g.dataset.key },
    h("thead", {}, h("tr", {}, header.map((x, i) => h("th", { class: numeric.includes(i) ? "n" : null }, x)))),
    h("tbody", {}, g.rows.map((/** @type {any} */ r, /** @type {number} */ i) => h("tr", { "data-row": r.key, class: r.comparable ? null : "not-comparable" },
      h("td", { class: "n" }, String(i + 1)),
      h("td", {}, r.agent),
      h("td", {}, r.model ?? "-"),
      h("td", { class: "n" }, `${pct(r.passRate)}${ciText(r.ci)}`),
      h("td", {}, r.passAtK.length > 1 ? r.passAtK.filter((/** @type {any} */ p) => p.k === 1 || p.k === r.passAtK.length || p.k === 5 || p.k === 10).map((/** @type {any} */ p) => `@${p.k} ${pct(p.value)}`).join(" ") : "-"),
      h("td", { class: "n cost" }, money(r.costPerTask)),
      h("td", { class: "n" }, tokens(r.tokensPerTask)),
      h("td", { class: "n" }, r.medianTrialMs === null ? "-" : dur(r.medianTrialMs)),
      h("td", { class: "n" }, String(r.trials)),
      h("td", {}, r.runs.slice(0, 3).flatMap((/** @type {string} */ id, /** @type {number} */ j) => [j ? ", " : "", h("a", { href: `#/run/${enc(id)}` }, id)]), r.runs.length > 3 ? ` +${r.runs.length - 3} more` : ""),
      h("td", { class: r.comparable ? "comparable" : "comparable error", title: r.notComparable ?? "" }, r.comparable ? "yes" : `⚠ not comparable: ${r.notComparable}`),
    ))),
  );
}

/** @param {any} g */
function groupHeading(g) {
  return h("h2", { class: "dataset" }, `${g.dataset.key} `,
    g.dataset.from === "sources" ? h("span", { class: "muted" }, "(by its sources' names) ") : null,
    g.comparable ? null : h("span", { class: "error flag" }, "⚠ not all rows comparable "),
    h("a", { href: `#/leaderboard/${enc(g.dataset.key)}`, class: "plots-link" }, "plots →"));
}

const BOARD_NOTE = "Pass rate: clean passes / finished trials over a row's runs (errors count as not passed), 95% Wilson interval. pass@k: unbiased estimator, when a task has more than one attempt. Cost per task: USD over every attempt / tasks; — when unpriced. Rows are flagged when their tasks (ids or content hashes) differ from the set most rows of the dataset ran.";

async function leaderboardPage() {
  setCrumbs([["runs", "#/"], ["leaderboard", ""]]);
  const board = await api("api/leaderboard");
  show(
    h("h1", {}, "Leaderboard"),
    h("p", { class: "muted", id: "board-summary" }, `${board.runs} run${board.runs === 1 ? "" : "s"} over ${board.groups.length} dataset${board.groups.length === 1 ? "" : "s"}, grouped by agent and model.`),
    board.groups.length === 0 ? h("p", { class: "muted" }, "No runs found yet. Start one with proctor run; it appears here live.") : null,
    board.groups.map((/** @type {any} */ g) => h("section", { class: "group" }, groupHeading(g), boardTable(g))),
    h("p", { class: "muted" }, BOARD_NOTE),
  );
}

/** Runs picked for a dataset's plots, by dataset key (none: the server's default, the newest of each row). @type {Map<string, string[]>} */
const plotRuns = new Map();
/** The run picker stays open across live re-renders. */
let pickerOpen = false;

/** @param {string} key */
async function plotsPage(key) {
  setCrumbs([["runs", "#/"], ["leaderboard", "#/leaderboard"], [key, ""]]);
  const picked = plotRuns.get(key);
  const { group, plots } = await api(`api/leaderboard/plots?dataset=${enc(key)}${picked ? `&runs=${picked.map(enc).join(",")}` : ""}`);
  const pick = (/** @type {string} */ runId, /** @type {boolean} */ on) => {
    const now = plots.runs.filter((/** @type {any} */ r) => r.selected).map((/** @type {any} */ r) => r.runId).filter((/** @type {string} */ id) => id !== runId);
    if (on) now.push(runId);
    if (now.length === 0) return;
    plotRuns.set(key, now);
    void route();
  };
  const file = key.replace(/[^A-Za-z0-9._-]+/g, "_");
  show(
    h("h1", {}, `Plots: ${key}`),
    groupHeading(group),
    boardTable(group),
    h("details", { id: "plot-runs", open: pickerOpen, ontoggle: (/** @type {Event} */ e) => (pickerOpen = /** @type {HTMLDetailsElement} */ (e.target).open) },
      h("summary", {}, `Runs shown: ${plots.runs.filter((/** @type {any} */ r) => r.selected).length} of ${plots.runs.length} (bars: the first 6)`),
      h("ul", { class: "picker" }, plots.runs.map((/** @type {any} */ r) => h("li", {},
        h("label", {}, h("input", { type: "checkbox", checked: r.selected, "data-run": r.runId, onchange: (/** @type {Event} */ e) => pick(r.runId, /** @type {HTMLInputElement} */ (e.target).checked) }), ` ${r.label} `, h("a", { href: `#/run/${enc(r.runId)}` }, r.runId), h("span", { class: "muted" }, ` ${r.startedAt.slice(0, 16).replace("T", " ")}`))))),
    ),
    h("div", { class: "plots" },
      figure("plot-cost", costPlot(plots.cost), `${file}-cost`),
      plots.cost.unpriced.length ? h("p", { class: "muted", id: "unpriced" }, `Not plotted (no cost recorded): ${plots.cost.unpriced.join(", ")}`) : null,
      figure("plot-categories", categoryPlot(plots.categories), `${file}-categories`),
      figure("plot-passk", passAtKPlot(plots.passAtK), `${file}-pass-at-k`),
      figure("plot-heatmap", heatmapPlot(plots.heatmap, (runId, trialId) => `#/run/${enc(runId)}/trial/${enc(trialId)}`), `${file}-tasks`),
    ),
    h("p", { class: "muted" }, BOARD_NOTE),
  );
}

// ---- routing and live updates ----------------------------------------------------------------

/** @returns {string[]} */
function currentRoute() {
  return location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
}

/** @param {unknown} error */
function fail(error) {
  if (error instanceof SignedOut) return void signedOut();
  show(h("h1", {}, "Not found"), h("p", { class: "error" }, String(/** @type {Error} */ (error).message)), h("a", { href: "#/" }, "all runs"));
}

let rendering = Promise.resolve();
function route() {
  rendering = rendering.then(async () => {
    if (!session.signedIn) return loginPage();
    const [page, a, sub, b] = currentRoute();
    try {
      if (page === "run" && a && sub === "trial" && b) await trialPage(a, b);
      else if (page === "run" && a) await runPage(a);
      else if (page === "compare" && a && sub) await comparePage(a, sub);
      else if (page === "leaderboard" && a) await plotsPage(a);
      else if (page === "leaderboard") await leaderboardPage();
      else await runsPage();
    } catch (error) {
      fail(error);
    }
  });
  return rendering;
}

// ---- session (the server's /ui; proctor view has no login) --------------------------------------

/** @type {{login: boolean, signedIn: boolean, identity: string | null}} */
let session = { login: false, signedIn: false, identity: null };

async function loadSession() {
  session = await api("api/session");
  who.replaceChildren(
    ...(session.login && session.signedIn
      ? [h("span", { class: "muted", id: "identity" }, session.identity ?? ""), " ", h("button", { id: "logout", onclick: () => void logout() }, "Sign out")]
      : []),
  );
}

function signedOut() {
  session = { ...session, signedIn: false };
  who.replaceChildren();
  if (socket) socket.close();
  loginPage();
}

/**
 * The token goes in a POST body, never in a URL (URLs end up in logs, history and Referer
 * headers); the server answers with an HttpOnly, SameSite=Strict session cookie that scripts
 * cannot read.
 */
function loginPage() {
  setCrumbs([["sign in", ""]]);
  const input = /** @type {HTMLInputElement} */ (h("input", { type: "password", id: "token", name: "token", autocomplete: "current-password", required: true, "aria-label": "token", size: 48 }));
  const message = h("p", { class: "error", id: "login-error" }, "");
  const form = h("form", { id: "login", class: "filters", onsubmit: (/** @type {Event} */ e) => {
    e.preventDefault();
    void (async () => {
      const res = await fetch("api/login", { method: "POST", headers: { "content-type": "application/json", accept: "application/json" }, credentials: "same-origin", body: JSON.stringify({ token: input.value }) });
      if (!res.ok) {
        const body = await res.json().catch(() => ({}));
        message.textContent = body.message || `sign-in failed (${res.status})`;
        return;
      }
      input.value = "";
      await loadSession();
      connect();
      await route();
    })();
  } }, h("label", { for: "token" }, "Token "), input, h("button", { type: "submit" }, "Sign in"));
  show(
    h("h1", {}, "Sign in"),
    form,
    message,
    h("p", { class: "muted" }, "Paste a bearer token of this server (auth token), or a one-time login token from POST /ui/login-token signed with your hotkey (auth epistula). It is sent once in the request body; the browser keeps only an HttpOnly session cookie."),
  );
  input.focus();
}

async function logout() {
  await fetch("api/logout", { method: "POST", credentials: "same-origin" });
  signedOut();
}

// ---- live updates ---------------------------------------------------------------------------------

/** @type {WebSocket | null} */
let socket = null;
let boardTimer = 0;
let boardLast = 0;
/** Re-renders the leaderboard page now, or once a second has passed since the last time. */
function boardRefresh() {
  if (boardTimer) return;
  boardTimer = window.setTimeout(() => {
    boardTimer = 0;
    boardLast = Date.now();
    if (currentRoute()[0] === "leaderboard") void route();
  }, Math.max(0, 1000 - (Date.now() - boardLast)));
}
function connect() {
  if (socket) return;
  const url = new URL("ws", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  url.hash = "";
  const ws = new WebSocket(url.href);
  socket = ws;
  ws.addEventListener("open", () => {
    live.textContent = "live";
    live.className = "live on";
  });
  ws.addEventListener("message", (event) => {
    const msg = JSON.parse(String(event.data));
    if (msg.type !== "changed") return;
    const [page, a, sub] = currentRoute();
    // The runs list shows every run; a run or compare page only cares about its own runs; a trial page is final.
    // The leaderboard and its plots are over every run: any change, at most once a second (a live run changes often).
    if (page === "leaderboard") return boardRefresh();
    if (!page || (page === "run" && sub !== "trial" && msg.runIds.includes(a)) || (page === "compare" && (msg.runIds.includes(a) || msg.runIds.includes(sub)))) void route();
  });
  ws.addEventListener("close", () => {
    socket = null;
    live.textContent = "offline";
    live.className = "live off";
    if (!session.signedIn) return;
    // Reconnect only while signed in (a refused upgrade would be a console error on every try).
    setTimeout(() => {
      loadSession().then(() => (session.signedIn ? connect() : signedOut()), () => undefined);
    }, 2000);
  });
}

window.addEventListener("hashchange", () => void route());
loadSession().then(
  () => {
    void route();
    if (session.signedIn) connect();
  },
  (error) => fail(error),
);
