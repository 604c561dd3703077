import { mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ownedTempPrefix } from "@proctor/sandbox";
import { afterAll, expect, test } from "vitest";
import { proctor } from "./test-support";

const roots: string[] = [];
afterAll(async () => {
  await Promise.all(roots.map((root) => rm(root, { recursive: true, force: true })));
});

test("proctor gc removes the exec-channel dirs and repo checkouts of dead processes from the temp dir, and says how many", async () => {
  const temp = await mkdtemp(join(tmpdir(), "proctor-gc-test-"));
  roots.push(temp);
  const dead = (prefix: string, suffix: string) => `${ownedTempPrefix(prefix, 4_194_000, "12345")}${suffix}`; // no such pid
  const live = (prefix: string, suffix: string) => `${ownedTempPrefix(prefix, process.pid)}${suffix}`; // this test's process
  const names = [dead("proctor-channel-", "Ab3dE9"), dead("proctor-ws-", "Xy7kQ2"), dead("proctor-ws-", "Pq4rS5"), live("proctor-channel-", "Lm8nO1"), live("proctor-ws-", "Zz9yX8"), "proctor-ws-notours"];
  for (const name of names) await mkdir(join(temp, name, "repo"), { recursive: true });

  const gc = await proctor(["gc"], { env: { TMPDIR: temp } });
  expect(gc.code, gc.stderr).toBe(0);
  expect(gc.stdout).toContain(`temp: removed 1 exec-channel dir(s) left by dead processes in ${temp}`);
  expect(gc.stdout).toContain(`temp: removed 2 repo checkout(s) left by dead processes in ${temp}`);
  expect((await readdir(temp)).filter((name) => names.includes(name)).sort()).toEqual([live("proctor-channel-", "Lm8nO1"), live("proctor-ws-", "Zz9yX8"), "proctor-ws-notours"].sort());
});
