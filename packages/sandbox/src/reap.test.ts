import { execFileSync, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { LocalRuntime } from "./local";

let rootDir: string;
/** A sleep duration unique to this test process: livePids() looks machine-wide, and another run of the suite may be going on. */
const SECONDS = String(2_000_000 + (process.pid % 100_000) * 10);

beforeAll(async () => {
  rootDir = await mkdtemp(join(tmpdir(), "proctor-reap-test-"));
});

afterAll(async () => {
  await rm(rootDir, { recursive: true, force: true });
});

function livePids(pattern: string): number[] {
  const out = execFileSync("ps", ["-eo", "pid=,stat=,args="], { encoding: "utf8" });
  return out
    .split("\n")
    .map((line) => line.trim().match(/^(\d+)\s+(\S+)\s+(.*)$/))
    .filter((m): m is RegExpMatchArray => m !== null && !m[2]?.startsWith("Z") && (m[3] ?? "").startsWith(pattern))
    .map((m) => Number(m[1]));
}

/** Polls `check` until it holds or `timeoutMs` passes; returns whether it held. */
async function waitFor(check: () => boolean, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return check();
}

it("reap removes the root of an owner killed with -9, and the processes it left", async () => {
  const child = spawn(
    process.execPath,
    ["--conditions=@proctor/source", "--import", "tsx", join(import.meta.dirname, "fixtures/owner-child.ts"), rootDir, SECONDS],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const root = await new Promise<string>((resolve, reject) => {
    let buffered = "";
    child.stdout.on("data", (chunk: Buffer) => {
      buffered += chunk.toString();
      const line = buffered.split("\n")[0];
      if (buffered.includes("\n") && line) resolve((JSON.parse(line) as { root: string }).root);
    });
    child.once("exit", (code) => reject(new Error(`owner child exited early with ${code}`)));
  });
  // The child prints the root on "started", just before its shell execs the sleep: wait for it.
  expect(await waitFor(() => livePids(`sleep ${SECONDS}`).length === 1, 20_000)).toBe(true);

  // A sandbox whose owner (this process) is alive must survive the reap.
  const runtime = new LocalRuntime({ rootDir });
  const mine = await runtime.create({ image: "local" });

  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGKILL");
  await exited;
  expect(existsSync(root)).toBe(true);
  expect(livePids(`sleep ${SECONDS}`)).toHaveLength(1); // the owner's death alone does not stop it

  expect(await runtime.reap()).toBe(1);
  expect(existsSync(root)).toBe(false);
  await waitFor(() => livePids(`sleep ${SECONDS}`).length === 0, 20_000);
  expect(livePids(`sleep ${SECONDS}`)).toEqual([]);

  expect(await runtime.reap()).toBe(0);
  expect((await mine.exec(["true"])).exitCode).toBe(0);
  await mine.kill();
});
