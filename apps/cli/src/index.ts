export { main, buildProgram, VERSION } from "./program";
export { runCommand } from "./commands/run";
export type { RunCommandOptions } from "./commands/run";
export { CliError, UsageError, RuntimeMissingError } from "./errors";
