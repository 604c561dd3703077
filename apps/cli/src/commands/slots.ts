import { readFile, writeFile } from "node:fs/promises";
import { ClientError, SlotsClient, type SlotVerifyResult } from "@proctor/client";
import { CliError, UsageError } from "../errors";
import { renderTable } from "../format";
import { clientFor, type ServerCredentials } from "./submit";

/** `proctor slots <sub>`: a CLI over the /v1/slots API of a running `proctor serve --slots`, to try it by hand. */
export type SlotsAction =
  | { action: "create"; image?: string; task?: string; repo?: string; ttlSec?: number; json: boolean }
  | { action: "exec"; id: string; argv: string[]; shell?: string; timeoutSec?: number; cwd?: string }
  | { action: "put"; id: string; local: string; path: string }
  | { action: "get"; id: string; path: string; local?: string }
  | { action: "verify"; id: string; json: boolean }
  | { action: "rm"; id: string; reset: boolean }
  | { action: "pool"; json: boolean };

export type SlotsOptions = ServerCredentials & SlotsAction;

/** Exit code of `slots exec` when the command timed out (as timeout(1)). */
const EXIT_TIMED_OUT = 124;

/** The slots client with the caller's credentials (the same flags and env vars as `proctor submit`). */
function slotsClient(options: ServerCredentials): SlotsClient {
  const client = clientFor(options);
  return new SlotsClient(client.options.server, client.options);
}

/** `NAME@COMMIT` of --repo. */
function parseRepo(repo: string): { name: string; commit: string } {
  const m = /^([^@\s]+)@([0-9a-fA-F]{4,64})$/.exec(repo);
  if (!m) throw new UsageError(`--repo must be NAME@COMMIT (a repository of the server's --slots-repos-dir and a hex commit id), got "${repo}"`);
  return { name: m[1] as string, commit: m[2] as string };
}

/** What the server's refusal means for someone at a terminal: the status, its message, and what to do (said once: the server's answer already names the slot). */
export function explain(error: ClientError, server: string, id?: string): CliError {
  const hint: Record<number, string> = {
    0: `is the server running? start it with: proctor serve --slots (or check --server ${server})`,
    401: `the server ${server} did not accept the credentials: pass --token TOKEN (or PROCTOR_TOKEN) or a hotkey it allows (--key-file, PROCTOR_HOTKEY_URI)`,
    403: `slot ${id ?? ""} on ${server} belongs to another credential: use the credentials that created it`,
    404: !id
      ? `${server} does not serve the slots API: start it with proctor serve --slots`
      : error.message.includes(`no slot ${id}`)
        ? `it was released, or the server at ${server} restarted: create one with proctor slots create`
        : `no slot ${id} on ${server} (released, or the server restarted): create one with proctor slots create`,
    410: `slot ${id ?? ""} on ${server} is gone (expired, or its sandbox stopped): create a new one with proctor slots create`,
    503: `every slot on ${server} is busy${error.retryAfterSec !== null ? `; retry in ${error.retryAfterSec} s` : ""}, release slots (proctor slots rm ID) or start the server with a larger --slots-max-sandboxes`,
  };
  // One line: the server's answer, then what to do (an unreachable server's message says it already).
  const what = error.code === "unreachable" ? undefined : hint[error.statusCode];
  return new CliError(what ? `${error.message}; ${what}` : error.message, 1, { cause: error });
}

/** The per-test table of a SWE instance's verify. */
function testTable(result: SlotVerifyResult): string {
  const rows = (result.tests ?? []).map((t) => [t.name, t.expected, t.status]);
  return renderTable(["test", "expected", "status"], rows);
}

/** Runs one `proctor slots` subcommand; returns the exit code (for `exec`, the command's). */
export async function slotsCommand(options: SlotsOptions): Promise<number> {
  const client = slotsClient(options);
  const id = "id" in options ? options.id : undefined;
  try {
    return await run(client, options);
  } catch (error) {
    if (error instanceof ClientError) throw explain(error, options.server, id);
    throw error;
  }
}

async function run(client: SlotsClient, options: SlotsOptions): Promise<number> {
  const out = (text: string) => process.stdout.write(text);
  switch (options.action) {
    case "create": {
      if (options.image !== undefined && options.task !== undefined) throw new UsageError("give --image or --task, not both");
      const slot = await client.create({
        ...(options.image !== undefined ? { image: options.image } : {}),
        ...(options.task !== undefined ? { task: options.task } : {}),
        ...(options.repo !== undefined ? { repo: parseRepo(options.repo) } : {}),
        ...(options.ttlSec !== undefined ? { ttl_s: options.ttlSec } : {}),
      });
      if (options.json) out(`${JSON.stringify({ slot_id: slot.id, sandbox_id: slot.sandboxId, workdir: slot.workdir, expires_at: slot.expiresAt })}\n`);
      else {
        out(`${slot.id}\n`);
        process.stderr.write(`slot ${slot.id}: workdir ${slot.workdir} in sandbox ${slot.sandboxId.slice(0, 12)}, expires ${slot.expiresAt}\n`);
      }
      return 0;
    }
    case "exec": {
      if (options.shell === undefined && options.argv.length === 0) throw new UsageError("slots exec needs a command: proctor slots exec ID -- CMD [ARGS...], or --shell 'STRING'");
      if (options.shell !== undefined && options.argv.length > 0) throw new UsageError("give the command after -- or with --shell, not both");
      const result = await client.execStream(options.id, options.shell ?? options.argv, {
        ...(options.timeoutSec !== undefined ? { timeout_s: options.timeoutSec } : {}),
        ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
        onStdout: (text) => process.stdout.write(text),
        onStderr: (text) => process.stderr.write(text),
      });
      if (result.truncated) process.stderr.write("proctor: some output was dropped (the client read it too slowly)\n");
      if (result.timed_out) {
        process.stderr.write(`proctor: the command timed out after ${options.timeoutSec ?? "the server's default"} s; its processes were killed\n`);
        return EXIT_TIMED_OUT;
      }
      return result.exit_code;
    }
    case "put": {
      let data: Buffer;
      try {
        data = await readFile(options.local);
      } catch (error) {
        throw new UsageError(`slots put: cannot read ${options.local}: ${(error as Error).message}`, { cause: error });
      }
      await client.attach(options.id).writeFile(options.path, data);
      process.stderr.write(`wrote ${data.length} bytes to ${options.path} in slot ${options.id}\n`);
      return 0;
    }
    case "get": {
      const data = await client.attach(options.id).readFile(options.path);
      if (data === null) throw new CliError(`slot ${options.id} has no file ${options.path}`, 1);
      if (options.local !== undefined) {
        await writeFile(options.local, data);
        process.stderr.write(`wrote ${data.length} bytes to ${options.local}\n`);
      } else process.stdout.write(data);
      return 0;
    }
    case "verify": {
      const result = await client.attach(options.id).verify();
      if (options.json) out(`${JSON.stringify(result, null, 2)}\n`);
      else {
        if (result.tests && result.tests.length > 0) out(`${testTable(result)}\n\n`);
        out(`reward ${result.reward ?? "none"}: ${result.resolved ? "resolved" : "not resolved"}${result.error ? ` (${result.error})` : ""}\n`);
      }
      return result.reward === null ? 1 : 0;
    }
    case "rm": {
      await client.attach(options.id).release({ reset: options.reset });
      process.stderr.write(`released slot ${options.id}${options.reset ? "" : " (no reset)"}\n`);
      return 0;
    }
    case "pool": {
      const stats = await client.pool();
      if (options.json) out(`${JSON.stringify(stats)}\n`);
      else {
        out(
          `${renderTable(
            ["sandboxes", "slots", "busy", "waiting", "quarantined"],
            [[stats.sandboxes, stats.slots_total, stats.slots_busy, stats.waiting, stats.quarantined].map(String)],
          )}\n`,
        );
      }
      return 0;
    }
  }
}
