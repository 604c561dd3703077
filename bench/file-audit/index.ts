/**
 * Cost of a file audit (`sandbox.auditFiles()`) on a verifier-like, Python-heavy command, both
 * sides measured in the same run on the same container:
 *
 * 1. workload: one exec of a shell loop running `python3 -c 'import json,email,http.client,
 *    unittest,asyncio'` N times plus `python3 -m unittest` of a small suite, with vs without an
 *    audit around it; rounds interleaved (the order alternates), p50 of each, ratio (target <= 1.1x).
 * 2. exec-heavy: one exec of a shell loop running `/bin/true` M times (each exec waits for the
 *    audit's answer to a permission event), with vs without, the same way (no target: the worst case).
 * 3. CPU: the helper's own CPU time during an audited run of (1) vs the container's CPU time in that
 *    run (its cpuacct cgroup): the audit's CPU cost, much less sensitive to machine load than (1).
 * 4. start + stop: `auditFiles()` then `stop()` on an idle container, p50 (no baseline).
 *
 *   node --conditions=@proctor/source --import tsx bench/file-audit/index.ts [--rounds 7] [--imports 20] [--execs 500] [--image proctor/base:bookworm] [--json]
 */
import { readdirSync, readFileSync } from "node:fs";
import { parseArgs } from "node:util";
// The bench is not a workspace package, so it loads @proctor/sandbox-docker from source by path.
import { DockerRuntime, dockerAvailable, type DockerSandbox } from "../../packages/sandbox-docker/src/index";
import { reportFigure } from "../lib/figures";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "7" },
    imports: { type: "string", default: "20" },
    execs: { type: "string", default: "500" },
    image: { type: "string", default: "proctor/base:bookworm" },
    json: { type: "boolean", default: false },
  },
});
const rounds = Number(values.rounds);
const imports = Number(values.imports);
const execs = Number(values.execs);
const image = values.image;
const labels = { "proctor.bench": `file-audit-${process.pid}` };
const BENCH = "file-audit";
const RATIO_MEANING = "audited p50 / unaudited p50";

const SUITE = `import json, unittest
class T(unittest.TestCase):
    def test_json(self): self.assertEqual(json.loads(json.dumps({"a": [1, 2]})), {"a": [1, 2]})
    def test_str(self): self.assertTrue("abc".startswith("a"))
`;
const WORKLOAD = `i=0; while [ $i -lt ${imports} ]; do python3 -c 'import json,email,http.client,unittest,asyncio' || exit 1; i=$((i+1)); done
cd /tmp/bench-suite && python3 -m unittest -q 2>/dev/null`;
const EXECS = `i=0; while [ $i -lt ${execs} ]; do /bin/true || exit 1; i=$((i+1)); done`;

/** CPU seconds (user + system) of this process's child running the audit helper; 0 when none. */
function helperCpuSeconds(): number {
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const argv0 = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0")[0] ?? "";
      const fields = readFileSync(`/proc/${name}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
      // After "comm) ": state ppid ... utime (14th field overall, index 11 here) stime (index 12).
      if (Number(fields[1]) === process.pid && /\/file-audit-[0-9a-f]+$/.test(argv0)) return (Number(fields[11]) + Number(fields[12])) / 100;
    } catch {
      // gone meanwhile
    }
  }
  return 0;
}

/** CPU seconds the container's processes used so far (cgroup v1 cpuacct, or v2 cpu.stat). */
function containerCpuSeconds(initPid: number): number {
  const lines = readFileSync(`/proc/${initPid}/cgroup`, "utf8").split("\n");
  const v1 = lines.map((line) => /^\d+:(?:[^:]*,)?cpuacct(?:,[^:]*)?:(.*)$/.exec(line)?.[1]).find((path) => path !== undefined);
  if (v1 !== undefined) return Number(readFileSync(`/sys/fs/cgroup/cpuacct${v1}/cpuacct.usage`, "utf8")) / 1e9;
  const v2 = lines.map((line) => /^0::(.*)$/.exec(line)?.[1]).find((path) => path !== undefined);
  const usage = /^usage_usec (\d+)$/m.exec(readFileSync(`/sys/fs/cgroup${v2}/cpu.stat`, "utf8"))?.[1];
  return Number(usage) / 1e6;
}

function p50(samples: number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

async function main(): Promise<void> {
  const runtime = new DockerRuntime({ warmPool: 0 });
  if (!(await dockerAvailable(runtime.docker))) {
    console.error("No Docker daemon answers: start Docker (or set DOCKER_HOST) to run this benchmark.");
    process.exit(3);
  }
  if (!runtime.capabilities.fileAudit) {
    const why = runtime.capabilities.fileAuditUnavailable ?? "unknown";
    console.log(`file audit is not available here: ${why}`);
    reportFigure({ bench: BENCH, figure: "Python-heavy command, audited vs not", proctor: { value: Number.NaN, unit: "ms" }, baseline: null, ratio: null, ratioMeaning: RATIO_MEANING, target: { on: "ratio", op: "<=", value: 1.1 }, skipped: why });
    return;
  }
  const sandbox = (await runtime.create({ image, labels })) as DockerSandbox;
  try {
    await sandbox.writeFile("/tmp/bench-suite/test_small.py", SUITE);
    const initPid = (await runtime.docker.getContainer(sandbox.id).inspect()).State.Pid;
    const timed = async (script: string) => {
      const started = performance.now();
      const result = await sandbox.exec({ shell: script }, { user: "0", timeoutMs: 600_000 });
      if (result.exitCode !== 0) throw new Error(`the workload exited ${result.exitCode}: ${result.stderr.slice(-300)}`);
      return performance.now() - started;
    };
    const audited = async (script: string) => {
      const audit = await sandbox.auditFiles();
      const cpuBefore = containerCpuSeconds(initPid);
      const ms = await timed(script);
      const containerCpu = containerCpuSeconds(initPid) - cpuBefore;
      const helperCpu = helperCpuSeconds(); // read before stop: the helper exits then
      const report = await audit.stop();
      if (!report.complete) throw new Error(`the audit is incomplete: ${report.problems.join("; ")}`);
      return { ms, helperCpu, containerCpu, events: report.counts.events, accesses: report.accesses.length, processes: report.processes.length };
    };
    /** p50 of `rounds` runs of `script` with and without an audit, interleaved (the order alternates so drift in load hits both alike). */
    const compare = async (script: string) => {
      await timed(script); // warm the page cache and the daemon's exec path
      await audited(script); // builds the helper if this machine has none yet
      const plain: number[] = [];
      const withAudit: number[] = [];
      let last = { helperCpu: 0, containerCpu: 0, events: 0, accesses: 0, processes: 0 };
      const cpuShares: number[] = [];
      for (let round = 0; round < rounds; round++) {
        if (round % 2 === 0) plain.push(await timed(script));
        const { ms, ...counts } = await audited(script);
        withAudit.push(ms);
        cpuShares.push(counts.helperCpu / counts.containerCpu);
        last = counts;
        if (round % 2 === 1) plain.push(await timed(script));
      }
      return { plainP50Ms: p50(plain), auditedP50Ms: p50(withAudit), ratio: p50(withAudit) / p50(plain), helperCpuShare: p50(cpuShares), lastAudit: last };
    };
    const python = await compare(WORKLOAD);
    const execHeavy = await compare(EXECS);

    const startStop: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const started = performance.now();
      await (await sandbox.auditFiles()).stop();
      startStop.push(performance.now() - started);
    }

    const figures = { image, imports, execs, rounds, python, execHeavy, startStopP50Ms: p50(startStop) };
    if (values.json) console.log(JSON.stringify(figures));
    else {
      const ms = (v: number) => `${v.toFixed(0)} ms`;
      console.log(`image ${image}, p50 of ${rounds} rounds each`);
      console.log(`${imports} x python3 -c 'import json,email,http.client,unittest,asyncio' + python3 -m unittest: audited ${ms(python.auditedP50Ms)} vs not ${ms(python.plainP50Ms)}  ratio ${python.ratio.toFixed(3)}x (target <= 1.1x)`);
      console.log(`  one audited run: ${python.lastAudit.events} events, ${python.lastAudit.accesses} accesses, ${python.lastAudit.processes} processes; helper CPU ${(python.lastAudit.helperCpu * 1000).toFixed(0)} ms vs the container's ${(python.lastAudit.containerCpu * 1000).toFixed(0)} ms`);
      console.log(`  helper CPU / container CPU, p50: ${(python.helperCpuShare * 100).toFixed(2)}%`);
      console.log(`${execs} x /bin/true: audited ${ms(execHeavy.auditedP50Ms)} vs not ${ms(execHeavy.plainP50Ms)}  ratio ${execHeavy.ratio.toFixed(3)}x`);
      console.log(`auditFiles() + stop() on an idle container: ${ms(figures.startStopP50Ms)}`);
    }
    reportFigure({
      bench: BENCH,
      figure: `Python-heavy command (${imports} imports + unittest), p50 of ${rounds}`,
      proctor: { value: python.auditedP50Ms, unit: "ms" },
      baseline: { value: python.plainP50Ms, unit: "ms", label: "same command, no audit" },
      ratio: python.ratio,
      ratioMeaning: RATIO_MEANING,
      target: { on: "ratio", op: "<=", value: 1.1 },
    });
    reportFigure({
      bench: BENCH,
      figure: `Python-heavy command: the audit helper's CPU / the container's CPU, p50 of ${rounds}`,
      proctor: { value: python.helperCpuShare * 100, unit: "%" },
      baseline: null,
      ratio: python.helperCpuShare,
      ratioMeaning: "helper CPU seconds / container CPU seconds",
      target: { on: "ratio", op: "<=", value: 0.05 },
    });
    reportFigure({
      bench: BENCH,
      figure: `exec-heavy command (${execs} x /bin/true), p50 of ${rounds}`,
      proctor: { value: execHeavy.auditedP50Ms, unit: "ms" },
      baseline: { value: execHeavy.plainP50Ms, unit: "ms", label: "same command, no audit" },
      ratio: execHeavy.ratio,
      ratioMeaning: RATIO_MEANING,
      target: null,
    });
    reportFigure({
      bench: BENCH,
      figure: `auditFiles() + stop() on an idle container, p50 of ${rounds}`,
      proctor: { value: figures.startStopP50Ms, unit: "ms" },
      baseline: null,
      ratio: null,
      ratioMeaning: "",
      target: null,
    });
  } finally {
    await sandbox.kill();
    await runtime.drain();
    const left = await runtime.docker.listContainers({ all: true, filters: { label: [`proctor.bench=${labels["proctor.bench"]}`] } });
    await Promise.all(left.map((c) => runtime.docker.getContainer(c.Id).remove({ force: true, v: true })));
  }
}

await main();
