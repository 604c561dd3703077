import { describe, expect, test } from "vitest";
import { mkdtemp, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findDataset, loadRegistry, parseRegistry } from "./registry";
import { RegistryError, UnknownDatasetError } from "./errors";

const sha = "0123456789abcdef0123456789abcdef01234567";
const task = { name: "hello", git_url: "https://example.com/r.git", git_commit_id: sha, path: "tasks/hello" };
const harbor = [
  { name: "tiny", version: "1.0", description: "v1", tasks: [task], metrics: [{ type: "mean" }] },
  { name: "tiny", version: "2.0", description: "v2", tasks: [{ ...task, git_commit_id: null }] },
  { name: "other", version: "head", description: "", tasks: [] },
];

describe("parseRegistry", () => {
  test("reads Harbor's registry.json unchanged (extra fields such as metrics ignored)", () => {
    const datasets = parseRegistry(JSON.stringify(harbor), "r.json");
    expect(datasets).toEqual([
      { name: "tiny", version: "1.0", description: "v1", tasks: [task] },
      { name: "tiny", version: "2.0", description: "v2", tasks: [{ ...task, git_commit_id: null }] },
      { name: "other", version: "head", description: "", tasks: [] },
    ]);
  });

  test("each problem names the dataset, the task and the field", () => {
    const bad = (value: unknown) => () => parseRegistry(JSON.stringify(value), "r.json");
    expect(bad("x")).toThrow('registry r.json: expected a JSON array of datasets (Harbor\'s registry.json), got "x"');
    expect(() => parseRegistry("{", "r.json")).toThrow(/^registry r.json is not JSON \(/);
    expect(bad([{ version: "1", tasks: [] }])).toThrow('registry r.json: dataset #1: "name" must be a non-empty string, got nothing (the field is missing)');
    expect(bad([{ name: "t", version: "1", tasks: {} }])).toThrow('dataset #1 (t@1): "tasks" must be a list of {name, git_url, git_commit_id, path}, got an object');
    expect(bad([{ name: "t", version: "1", tasks: [{ ...task, path: 3 }] }])).toThrow('dataset #1 (t@1), task #1 ("hello"): "path" must be the task\'s directory in the repository (a string), got 3');
    expect(bad([{ name: "t", version: "1", tasks: [{ ...task, git_commit_id: 7 }] }])).toThrow(RegistryError);
  });
});

test("findDataset: the nearest name for a typo, the versions for an unknown one, the only version when none is given", () => {
  const registry = { location: "r.json", datasets: parseRegistry(JSON.stringify(harbor), "r.json") };
  expect(findDataset(registry, "tiny", "2.0").description).toBe("v2");
  expect(findDataset(registry, "other", null).version).toBe("head");
  expect(() => findDataset(registry, "tiyn", "1.0")).toThrow('unknown dataset "tiyn" in registry r.json: did you mean tiny?');
  expect(() => findDataset(registry, "tiny", "3.0")).toThrow('dataset "tiny" has no version "3.0" in registry r.json; its versions: 1.0, 2.0');
  expect(() => findDataset(registry, "tiny", null)).toThrow(UnknownDatasetError);
});

test("loadRegistry: a URL that cannot be fetched reads the copy cached by an earlier fetch, else says how to give a file", async () => {
  const cacheDir = await mkdtemp(join(tmpdir(), "proctor-registry-"));
  const url = "http://127.0.0.1:9/registry.json";
  await expect(loadRegistry(url, { cacheDir, timeoutMs: 2000 })).rejects.toThrow(/^registry http:\/\/127\.0\.0\.1:9\/registry\.json cannot be fetched \(.+\) and no copy of it is cached: pass --registry FILE/);
  const file = join(cacheDir, "r.json");
  await writeFile(file, JSON.stringify(harbor));
  expect((await loadRegistry(file, { cacheDir })).datasets).toHaveLength(3);
});

test("loadRegistry: a URL's registry is cached, and read from the cache once the URL stops answering", async () => {
  const cacheDir = await mkdtemp(join(tmpdir(), "proctor-registry-"));
  const server = createServer((_req, res) => res.end(JSON.stringify(harbor)));
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/registry.json`;
  const online = await loadRegistry(url, { cacheDir });
  expect(online.staleReason).toBeUndefined();
  server.closeAllConnections();
  await new Promise((done) => server.close(done));
  const offline = await loadRegistry(url, { cacheDir, timeoutMs: 2000 });
  expect(offline.datasets).toEqual(online.datasets);
  expect(offline.staleReason).toMatch(/ECONNREFUSED|UND_ERR_SOCKET/);
});
