import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it, onTestFinished } from "vitest";
import { LocalRuntime } from "./local";
import { SlotGoneError, SlotPathError, SlotPool, SlotPoolExhaustedError, type SlotPoolOptions } from "./slots";

// The local runtime: host processes in a temp root. The same pool runs on Docker in
// packages/sandbox-docker/src/slots.test.ts.
const runtime = new LocalRuntime();
const pools: SlotPool[] = [];
function pool(options: Partial<SlotPoolOptions> = {}): SlotPool {
  const p = new SlotPool({ runtime, image: "local", ...options });
  pools.push(p);
  return p;
}
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.close()));
});

async function until(check: () => boolean | Promise<boolean>, timeoutMs = 60_000): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return check();
}

/** Whether a host process with this pid is alive (not a zombie). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/\) Z /.test(execFileSync("cat", [`/proc/${pid}/stat`]).toString());
  } catch {
    return false;
  }
}

describe("SlotPool (local runtime)", () => {
  const repoDir = mkdtempSync(join(tmpdir(), "proctor-slots-repo-"));
  afterAll(() => rmSync(repoDir, { recursive: true, force: true }));

  it("keeps slots of one sandbox apart (files, processes) and a reset cleans only its own slot", async () => {
    const p = pool({ slotsPerSandbox: 2, maxSandboxes: 1 });
    const [a, b] = await Promise.all([p.acquire(), p.acquire()]);
    expect(a.sandboxId).toBe(b.sandboxId);
    expect(a.workdir).not.toBe(b.workdir);
    await a.writeFile("note.txt", "from a");
    expect(await b.readFile("note.txt")).toBeNull();
    expect((await a.exec(["cat", "note.txt"])).stdout).toBe("from a");
    const bgA = Number((await a.exec({ shell: "sleep 300 >/dev/null 2>&1 & echo $!" })).stdout.trim());
    const bgB = Number((await b.exec({ shell: "sleep 300 >/dev/null 2>&1 & echo $!" })).stdout.trim());
    expect(alive(bgA) && alive(bgB)).toBe(true);
    await p.release(a);
    expect(await until(() => !alive(bgA))).toBe(true);
    expect(alive(bgB)).toBe(true);
    const again = await p.acquire();
    expect(again.index).toBe(a.index);
    expect((await again.exec({ shell: "ls -A" })).stdout).toBe("");
    await p.release(b);
    expect(await until(() => !alive(bgB))).toBe(true);
  });

  it("a released slot refuses further use; paths with .. are refused", async () => {
    const p = pool({ slotsPerSandbox: 1, maxSandboxes: 1 });
    const slot = await p.acquire();
    expect(() => slot.path("../other/x")).toThrow(SlotPathError);
    expect(() => slot.path("a/../../x")).toThrow(SlotPathError);
    await expect(slot.writeFile("../escape", "x")).rejects.toBeInstanceOf(SlotPathError);
    await p.release(slot);
    await expect(slot.exec(["true"])).rejects.toBeInstanceOf(SlotGoneError);
  });

  it("resets a repo slot to its commit (files, commits, ignored files)", async () => {
    execFileSync("sh", ["-c", `cd "${repoDir}" && git init -q && git config user.email t@t && git config user.name t && echo base > file.txt && echo 'build/' > .gitignore && git add -A && git commit -qm base`]);
    const commit = execFileSync("git", ["-C", repoDir, "rev-parse", "HEAD"]).toString().trim();
    const p = pool({ slotsPerSandbox: 1, maxSandboxes: 1 });
    const slot = await p.acquire({ key: "repo", repo: { path: repoDir, commit } });
    expect((await slot.exec(["cat", "file.txt"])).stdout).toBe("base\n");
    await slot.exec({ shell: "echo changed > file.txt && mkdir -p build && echo x > build/out && echo new > new.txt && git -c user.email=a@b -c user.name=a commit -qam change" });
    expect((await slot.exec(["git", "rev-parse", "HEAD"])).stdout.trim()).not.toBe(commit);
    await p.release(slot);
    const next = await p.acquire({ key: "repo", repo: { path: repoDir, commit } });
    expect(next.sandboxId).toBe(slot.sandboxId);
    expect((await next.exec(["git", "rev-parse", "HEAD"])).stdout.trim()).toBe(commit);
    expect((await next.exec(["cat", "file.txt"])).stdout).toBe("base\n");
    expect((await next.exec({ shell: "git status --porcelain --ignored; ls -A" })).stdout).toBe(".git\n.gitignore\nfile.txt\n");
  });

  it("checks out worktrees for many slots of one sandbox at once (git does not lock its worktree list)", async () => {
    const repo = mkdtempSync(join(tmpdir(), "proctor-slots-many-"));
    onTestFinished(() => rmSync(repo, { recursive: true, force: true }));
    execFileSync("sh", ["-c", `cd "${repo}" && git init -q && echo base > file.txt && git add -A && git -c user.email=t@t -c user.name=t commit -qm base`]);
    const commit = execFileSync("git", ["-C", repo, "rev-parse", "HEAD"]).toString().trim();
    for (let round = 0; round < 4; round++) {
      const p = pool({ slotsPerSandbox: 8, maxSandboxes: 1 });
      const slots = await Promise.all(Array.from({ length: 8 }, () => p.acquire({ key: "many", repo: { path: repo, commit } })));
      expect(new Set(slots.map((slot) => slot.sandboxId)).size).toBe(1);
      for (const slot of slots) expect((await slot.exec(["git", "rev-parse", "HEAD"])).stdout.trim()).toBe(commit);
      await p.close();
    }
  });

  it("quarantines and replaces a sandbox whose reset cannot be confirmed", async () => {
    const commit = execFileSync("git", ["-C", repoDir, "rev-parse", "HEAD"]).toString().trim();
    const p = pool({ slotsPerSandbox: 2, maxSandboxes: 1 });
    const [slot, neighbour] = await Promise.all([p.acquire({ repo: { path: repoDir, commit } }), p.acquire()]);
    // The slot destroys the repository cache its worktree hangs on: git reset cannot work any more.
    await slot.exec({ shell: 'rm -rf "$(git rev-parse --git-common-dir)"' });
    await p.release(slot);
    expect(p.stats().quarantined).toBe(1);
    // The other slot of that sandbox is lost with it, and says so.
    await expect(neighbour.exec(["true"])).rejects.toThrow(/quarantined/);
    const fresh = await p.acquire();
    expect(fresh.sandboxId).not.toBe(slot.sandboxId);
  });

  it("keeps the warm minimum started", async () => {
    const p = pool({ minSandboxes: 2, maxSandboxes: 3 });
    expect(await until(() => p.stats().sandboxes === 2)).toBe(true);
    expect(p.stats()).toMatchObject({ slotsBusy: 0, slotsTotal: 8 });
  });

  it("an acquire that finds no free slot in time is SlotPoolExhaustedError with a retry hint", async () => {
    const p = pool({ slotsPerSandbox: 1, maxSandboxes: 1, acquireTimeoutMs: 200 });
    const held = await p.acquire();
    const error = await p.acquire().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SlotPoolExhaustedError);
    expect((error as SlotPoolExhaustedError).retryAfterMs).toBeGreaterThan(0);
    expect(p.stats().waiting).toBe(0);
    // A waiter gets the slot as soon as it is released.
    const waiting = new SlotPool({ runtime, image: "local", slotsPerSandbox: 1, maxSandboxes: 1 });
    pools.push(waiting);
    const first = await waiting.acquire();
    const second = waiting.acquire();
    await waiting.release(first);
    expect((await second).index).toBe(0);
    await p.release(held);
  });

  it("reclaims idle slots and slots past their lifetime", async () => {
    const idle = pool({ slotsPerSandbox: 1, maxSandboxes: 1, idleTimeoutMs: 200 });
    const slot = await idle.acquire();
    expect(await until(() => slot.gone !== null)).toBe(true);
    await expect(slot.exec(["true"])).rejects.toThrow(/expired \(idle/);
    expect(await until(() => idle.stats().slotsBusy === 0)).toBe(true);

    const short = pool({ slotsPerSandbox: 1, maxSandboxes: 1, maxLifetimeMs: 300 });
    const busy = await short.acquire();
    // Kept busy, it still ends at its lifetime.
    expect(
      await until(async () => {
        await busy.exec(["true"]).catch(() => undefined);
        return busy.gone !== null;
      }),
    ).toBe(true);
    expect(busy.gone?.message).toMatch(/past its lifetime/);
  });

  it("executeBatch runs one slot's items in order and different slots in parallel", async () => {
    const p = pool({ slotsPerSandbox: 2, maxSandboxes: 1 });
    const [a, b] = await Promise.all([p.acquire(), p.acquire()]);
    const results = await p.executeBatch([
      { slot: a, command: { shell: "echo 1 >> log" } },
      { slot: b, command: { shell: "echo b" } },
      { slot: a, command: { shell: "echo 2 >> log" } },
      { slot: a, command: ["cat", "log"] },
    ]);
    expect(results.map((r) => r.stdout)).toEqual(["", "b\n", "", "1\n2\n"]);
  });

  it("survives 1,000 concurrent acquire/exec/write/release cycles without leaking slots, sandboxes or fds", async () => {
    const p = pool({ slotsPerSandbox: 4, maxSandboxes: 2 });
    const fds = () => readdirSync("/proc/self/fd").length;
    // Warm up one cycle so lazily opened handles are counted in the baseline.
    const warm = await p.acquire();
    await p.release(warm);
    const baseline = fds();
    let cycles = 0;
    const worker = async (w: number) => {
      while (cycles < 1000) {
        cycles++;
        const slot = await p.acquire();
        const result = await slot.exec({ shell: `ls -A; echo ${w} > mine` });
        // Every slot starts empty: nothing another holder left is visible.
        expect(result.stdout).toBe("");
        await p.release(slot);
      }
    };
    await Promise.all(Array.from({ length: 12 }, (_, w) => worker(w)));
    expect(p.stats()).toMatchObject({ slotsBusy: 0, waiting: 0, quarantined: 0 });
    expect(p.stats().sandboxes).toBeLessThanOrEqual(2);
    expect(fds()).toBeLessThanOrEqual(baseline + 8);
  });
});
