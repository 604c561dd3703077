import { constants, openSync, closeSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { silentLogger } from "@proctor/schema";
import { describe, expect, it } from "vitest";
import { ExecChannel } from "./channel";

/** Pipe handles (our FIFO readers) this process holds open. */
const pipes = () => process.getActiveResourcesInfo().filter((r) => r === "PipeWrap").length;

describe("the exec channel's host side", () => {
  it("an exec whose FIFOs vanish mid-open (the sandbox was removed) leaves no FIFO open behind it", async () => {
    const channel = await ExecChannel.create(silentLogger);
    if (!channel) throw new Error("mkfifo is needed here");
    await channel.arm();
    // Stand in for the keep-alive: it holds `live` open while the container runs.
    const keepAlive = openSync(join(channel.hostDir, "live"), constants.O_WRONLY | constants.O_NONBLOCK);
    try {
      await channel.started(true);
      expect(channel.ready).toBe(true);
      const before = pipes();
      // The first free lane is 0: its output FIFO is gone, so that open fails while the
      // other two (an open and a writer each, two round trips) are still in flight.
      unlinkSync(join(channel.hostDir, "o0"));
      const host = { killTree: async () => undefined, isRunning: async () => true };
      await expect(channel.exec(["true"], {}, "/", "x1", host)).rejects.toThrow(/ENOENT/);
      await new Promise((r) => setTimeout(r, 300));
      expect(pipes()).toBe(before);
    } finally {
      closeSync(keepAlive);
      await channel.close();
    }
  });
});
