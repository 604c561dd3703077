#!/usr/bin/env node
import { CommanderError } from "commander";
import { workerCommand } from "./program";

let code = 0;
const program = workerCommand((c) => (code = c)).exitOverride();
try {
  await program.parseAsync(process.argv);
  process.exitCode = code;
} catch (error) {
  // Commander printed its own one-line message (bad flag, bad value, --help, --version).
  if (error instanceof CommanderError) process.exitCode = error.exitCode === 0 ? 0 : 2;
  else {
    process.stderr.write(`proctor-worker: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}
