import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { LOCAL_ROOT_PREFIX, ownedTempPrefix } from "@proctor/sandbox";
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

test("proctor gc --dry-run lists what gc would remove (temp dirs and local sandbox roots of dead processes) and removes nothing", async () => {
  const temp = await mkdtemp(join(tmpdir(), "proctor-gc-dry-"));
  roots.push(temp);
  const dead = (prefix: string, suffix: string) => `${ownedTempPrefix(prefix, 4_194_000, "12345")}${suffix}`; // no such pid
  const names = [dead("proctor-channel-", "Ab3dE9"), dead("proctor-ws-", "Xy7kQ2"), `${ownedTempPrefix("proctor-ws-", process.pid)}Zz9yX8`];
  for (const name of names) await mkdir(join(temp, name, "repo"), { recursive: true });
  // A local sandbox root whose owner (no such pid) is gone.
  const root = join(temp, `${LOCAL_ROOT_PREFIX}Qw1eR2`);
  await mkdir(join(root, ".proctor-sandbox"), { recursive: true });
  await writeFile(join(root, ".proctor-sandbox", "owner.json"), JSON.stringify({ id: "sbx-dead", ownerPid: 4_194_000, ownerStartTime: "12345", image: "x", workdir: "/app", labels: {}, createdAt: new Date().toISOString() }));
  const ours = async () => (await readdir(temp)).filter((name) => names.includes(name) || name === basename(root)).sort();
  const before = await ours();
  expect(before).toHaveLength(4);

  const gc = await proctor(["gc", "--dry-run"], { env: { TMPDIR: temp } });
  expect(gc.code, gc.stderr).toBe(0);
  expect(gc.stdout).toContain(`temp: would remove 1 exec-channel dir(s) left by dead processes in ${temp}\n  ${join(temp, names[0] as string)}\n`);
  expect(gc.stdout).toContain(`temp: would remove 1 repo checkout(s) left by dead processes in ${temp}\n  ${join(temp, names[1] as string)}\n`);
  expect(gc.stdout).toContain(`local: would remove 1 sandbox root(s) left by dead runs\n  ${root} (sandbox sbx-dead, owner pid 4194000)\n`);
  expect(gc.stdout).toMatch(/would remove \d+ in all \(--dry-run: nothing was removed/);
  expect(gc.stdout).not.toContain(names[2]);
  expect(await ours()).toEqual(before);
});
