/**
 * Epistula v2 verification throughput on one thread: full `verifyRequest` calls per CPU second
 * (header parsing, SS58 decode, allowlist, body sha256, sr25519, replay cache) beside the raw
 * sr25519 verify rate of the same engine, measured in the same run, and their ratio: for the
 * default verifier (schnorrkel in WebAssembly once loaded) and for @scure/sr25519 (what the
 * default answers with until then).
 *
 *   node --conditions=@proctor/source --import tsx bench/auth-verify/index.ts [--seconds 1] [--rounds 3] [--body-bytes 1024]
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
// The bench is not a workspace package, so it loads @proctor/auth from source by path.
import {
  Allowlist,
  Keypair,
  ReplayCache,
  defaultSr25519,
  scureSr25519,
  signRequest,
  sr25519Ready,
  verifyRequest,
  type Sr25519Verifier,
} from "../../packages/auth/src/index";
import { reportFigure } from "../lib/figures";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "1" },
    rounds: { type: "string", default: "3" },
    "body-bytes": { type: "string", default: "1024" },
    requests: { type: "string", default: "1500" },
  },
});
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const bodyBytes = Number(values["body-bytes"]);
const requestCount = Number(values.requests);

// Load the libraries themselves (not our wrappers) for the raw baselines.
const authDir = join(dirname(fileURLToPath(import.meta.url)), "../../packages/auth");
const requireFromAuth = createRequire(join(authDir, "package.json"));
const scure = (await import(pathToFileURL(requireFromAuth.resolve("@scure/sr25519")).href)) as typeof import("@scure/sr25519");
// Its ESM entry, the module instance the default verifier initialises. require.resolve only
// sees the "require" condition (cjs/), whose package root is one level up.
const cjsDir = dirname(requireFromAuth.resolve("@polkadot/wasm-crypto/package.json"));
const wasmDir = cjsDir.endsWith("/cjs") ? dirname(cjsDir) : cjsDir;
const schnorrkel = (await import(pathToFileURL(join(wasmDir, "index.js")).href)) as typeof import("@polkadot/wasm-crypto");
// What a server that verifies gets by default once the engine has loaded (tens of ms after the first verification).
const defaultEngine = await sr25519Ready();

// A realistic server: 100 allowlisted validators, node-style lowercase headers, a JSON-ish body.
const signer = Keypair.generate();
const allowlist = Allowlist.from([...Array.from({ length: 99 }, () => Keypair.generate().address), signer.address]);
const body = Buffer.alloc(bodyBytes, '{"task":"x"}');
const now = Date.now();
const requests = Array.from({ length: requestCount }, () => {
  const headers = signRequest({ keypair: signer, body, now });
  return Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
});
const rawMessage = new TextEncoder().encode(`${"ab".repeat(32)}.3fa85f64-5717-4562-b3fc-2c963f66afa6.${now}.`);
const rawSignature = signer.sign(rawMessage);
const publicKey = signer.publicKey;

/**
 * Calls of `fn` per second of this process's CPU time (user + system) over `seconds` of wall
 * time: on a shared machine, other processes' load lowers the calls per wall second but hardly
 * the calls per CPU second. The wall rate is kept to print beside it.
 */
function rate(fn: (i: number) => void, wallRates: number[]): number {
  let n = 0;
  const start = performance.now();
  const cpuStart = process.cpuUsage();
  const end = start + seconds * 1000;
  let t = start;
  while (t < end) {
    for (let k = 0; k < 10; k++) fn(n++);
    t = performance.now();
  }
  const cpu = process.cpuUsage(cpuStart);
  wallRates.push(n / ((t - start) / 1000));
  return n / ((cpu.user + cpu.system) / 1e6);
}

function fullVerify(verifier: Sr25519Verifier): (i: number) => void {
  let cache = new ReplayCache();
  return (i) => {
    const slot = i % requests.length;
    if (slot === 0) cache = new ReplayCache(); // uuids repeat after one pass over the pre-signed set
    const headers = requests[slot] ?? {};
    verifyRequest({ headers, body, now, allowlist, maxSkewMs: 30_000, replayCache: cache, verifier });
  };
}

interface Engine {
  name: string;
  raw: () => void;
  full: (i: number) => void;
  rawRates: number[];
  fullRates: number[];
  fullWallRates: number[];
}
const engines: Engine[] = [
  {
    name: `default (${defaultEngine})`,
    raw: () => {
      if (!schnorrkel.sr25519Verify(rawSignature, rawMessage, publicKey)) throw new Error("raw verify failed");
    },
    full: fullVerify(defaultSr25519),
    rawRates: [],
    fullRates: [],
    fullWallRates: [],
  },
  {
    name: "@scure/sr25519 (before the load)",
    raw: () => {
      if (!scure.verify(rawMessage, rawSignature, publicKey)) throw new Error("raw verify failed");
    },
    full: fullVerify(scureSr25519),
    rawRates: [],
    fullRates: [],
    fullWallRates: [],
  },
];

// Warm up the JIT, then interleave rounds so load from other processes hits every phase alike.
for (const e of engines) {
  for (let i = 0; i < 200; i++) {
    e.raw();
    e.full(i);
  }
}
for (let r = 0; r < rounds; r++) {
  for (const e of engines) {
    e.rawRates.push(rate(e.raw, []));
    e.fullRates.push(rate(e.full, e.fullWallRates));
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

console.log(`auth-verify: Epistula v2 verifyRequest vs raw sr25519 verify, one thread, ${bodyBytes} B body, 100-key allowlist, median of ${rounds} x ${seconds} s; rates per CPU second of this process (per wall second in the last column); load average ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`);
console.log(`${"engine".padEnd(48)}${"raw verify/s".padStart(14)}${"full verify/s".padStart(15)}${"full/raw".padStart(10)}${"full/wall s".padStart(13)}`);
for (const e of engines) {
  const raw = median(e.rawRates);
  const full = median(e.fullRates);
  console.log(`${e.name.padEnd(48)}${raw.toFixed(0).padStart(14)}${full.toFixed(0).padStart(15)}${(full / raw).toFixed(2).padStart(10)}${median(e.fullWallRates).toFixed(0).padStart(13)}`);
}
for (const [i, e] of engines.entries()) {
  const full = median(e.fullRates);
  const raw = median(e.rawRates);
  // The target is on what a server gets by default; the pure-TS engine only answers until the fast one has loaded.
  const target = i === 0;
  if (target) console.log(`target >= 1000 full verifications/s with the default verifier: ${full >= 1000 ? "met" : "NOT met"} (${full.toFixed(0)}/s)`);
  reportFigure({
    bench: "auth-verify",
    figure: `Epistula v2 verifyRequest per CPU second, ${e.name}`,
    proctor: { value: full, unit: "/s" },
    baseline: { value: raw, unit: "/s", label: "raw sr25519 verify" },
    ratio: full / raw,
    ratioMeaning: "full verify rate / raw verify rate",
    target: target ? { on: "proctor", op: ">=", value: 1000, unit: "/s" } : null,
  });
}
