import { describe, expect, test } from "vitest";
import { dockerTestGate } from "../../packages/sandbox-docker/src/index";
import { commandBlocks, docs, parseMarker, runScript, scriptOf, verdict, type Block, type Marker } from "./blocks";

// Every command block of README.md and docs/*.md runs here, as a user would run it, unless a
// `docs-test skip="why"` marker above it says why it cannot (see blocks.ts for the markers). A
// block that stops working fails with its file, line and the tail of its output.

const all: { block: Block; marker: Marker }[] = docs.flatMap((doc) => commandBlocks(doc).map((block) => ({ block, marker: parseMarker(block).marker })));
// Docker blocks first: they take longest, and three run at once (vitest.config.ts).
const runnable = all.filter(({ marker }) => marker.skip === undefined).sort((a, b) => Number(b.marker.needs === "docker") - Number(a.marker.needs === "docker"));
const needDocker = runnable.some(({ marker }) => marker.needs === "docker");
const docker = needDocker ? await dockerTestGate() : false;

describe.concurrent("the guides' command blocks run as written", () => {
  // Each block's own limit, plus time to stop it and tear its directory down.
  for (const { block, marker } of runnable) {
    test(`${block.doc}:${block.line}`, { timeout: marker.timeoutSec * 1000 + 60_000 }, async (context) => {
      if (marker.needs === "docker" && !docker) context.skip();
      const run = await runScript(scriptOf(block, marker), marker.timeoutSec, { docker: marker.needs === "docker" });
      const failure = verdict(block, marker, run);
      if (failure !== null) throw new Error(failure);
    });
  }
});

test("a block that breaks fails with its file, line, the block and its output's tail", async () => {
  const block: Block = { doc: "docs/example.md", line: 12, lang: "sh", body: "proctor tasks list examples/tasks --no-such-flag\n", markerText: null };
  const { marker } = parseMarker(block);
  const run = await runScript(scriptOf(block, marker), 60);
  const failure = verdict(block, marker, run);
  expect(failure).toContain("docs/example.md:12: the command block exit 2 (expected 0)");
  expect(failure).toContain("proctor tasks list examples/tasks --no-such-flag");
  expect(failure).toMatch(/unknown option '--no-such-flag'/);
  // An expectation the output does not meet fails a block that exits 0.
  const listed = await runScript("proctor tasks list examples/tasks\n", 60);
  expect(verdict(block, { ...marker, expect: ["4 task(s)"] }, listed)).toBeNull();
  expect(verdict(block, { ...marker, expect: ["5 task(s)"] }, listed)).toContain("its output lacks 5 task(s)");
});
