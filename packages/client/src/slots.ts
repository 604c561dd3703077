import { createHash } from "node:crypto";
import { request } from "undici";
import { z } from "zod";
import { authHeaders, type ClientAuth } from "./client";
import { ClientError, unreachableError } from "./errors";

/** POST /v1/slots's answer. */
export const SlotCreated = z.object({ slot_id: z.string(), sandbox_id: z.string(), workdir: z.string(), expires_at: z.string() });
export type SlotCreated = z.infer<typeof SlotCreated>;
/** One exec's answer (also each item of a batch). */
export const SlotExecResult = z.object({
  exit_code: z.number(),
  stdout: z.string(),
  stderr: z.string(),
  timed_out: z.boolean(),
  duration_ms: z.number(),
  truncated: z.boolean(),
});
export type SlotExecResult = z.infer<typeof SlotExecResult>;
/** One test of a SWE instance's verify: its status (MISSING: not in the log) and which list it is on. */
export const SlotTestResult = z.object({
  name: z.string(),
  status: z.enum(["PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL", "MISSING"]),
  expected: z.enum(["FAIL_TO_PASS", "PASS_TO_PASS"]),
});
export type SlotTestResult = z.infer<typeof SlotTestResult>;
/** POST /v1/slots/:id/verify's answer; `tests` is null for tasks graded by a reward file. */
export const SlotVerifyResult = z
  .object({
    reward: z.number().nullable(),
    resolved: z.boolean(),
    tests: z.array(SlotTestResult).nullable(),
    exit_code: z.number().nullable().optional(),
    timed_out: z.boolean().optional(),
    output: z.string().optional(),
    error: z.string().nullable().optional(),
  })
  .passthrough();
export type SlotVerifyResult = z.infer<typeof SlotVerifyResult>;
export const PoolStats = z.object({ sandboxes: z.number(), slots_total: z.number(), slots_busy: z.number(), waiting: z.number(), quarantined: z.number() });
export type PoolStats = z.infer<typeof PoolStats>;

export interface SlotCreateOptions {
  image?: string;
  /** A task id of the server's --slots-tasks-dir (verify runs its tests). */
  task?: string;
  /** A repository of the server's --slots-repos-dir, checked out at `commit` in the slot's workdir. */
  repo?: { name: string; commit: string };
  env?: Record<string, string>;
  ttl_s?: number;
}

export interface SlotExecOptions {
  timeout_s?: number;
  env?: Record<string, string>;
  cwd?: string;
  stdin?: string;
  max_output_bytes?: number;
}

type Method = "GET" | "POST" | "PUT" | "DELETE";

/**
 * A typed client for the slots API (`proctor serve --slots`): acquire a slot, run commands,
 * move files, verify, release. Requests are signed like every other client call (ClientAuth).
 *
 *   const slots = new SlotsClient("http://127.0.0.1:8080", { token });
 *   const slot = await slots.create({ task: "greeting-file" });
 *   await slot.exec("echo hi > greeting.txt");
 *   const { reward } = await slot.verify();
 *   await slot.release();
 */
export class SlotsClient {
  constructor(
    readonly server: string,
    private readonly auth: ClientAuth = {},
  ) {}

  /** POST /v1/slots; a 503 (pool exhausted) is a ClientError with retryAfterSec. */
  async create(options: SlotCreateOptions = {}): Promise<Slot> {
    const created = SlotCreated.parse(await this.call("POST", "/v1/slots", options));
    return new Slot(this, created);
  }

  /** A handle on a slot created earlier (e.g. by another process) from its id. */
  attach(id: string): Slot {
    return new Slot(this, { slot_id: id, sandbox_id: "", workdir: "", expires_at: "" });
  }

  async pool(): Promise<PoolStats> {
    return PoolStats.parse(await this.call("GET", "/v1/pool"));
  }

  /** The request itself; a connection failure is a ClientError (status 0) naming the server. */
  private async send(method: Method, path: string, body: Buffer | undefined, headers: Record<string, string>) {
    try {
      return await request(new URL(path, this.server), { method, headers, body });
    } catch (error) {
      throw unreachableError(this.server, error) ?? new ClientError(0, "connection", `${method} ${path}: cannot reach ${this.server}: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
    }
  }

  /**
   * POST /v1/slots/:id/exec?stream=1: output goes to the callbacks as the command writes it, then
   * the result (without the output again). An error line from the server throws ClientError.
   */
  async execStream(id: string, command: string | string[], options: SlotExecOptions & { onStdout?: (text: string) => void; onStderr?: (text: string) => void } = {}): Promise<Omit<SlotExecResult, "stdout" | "stderr">> {
    const { onStdout, onStderr, ...rest } = options;
    const path = `/v1/slots/${encodeURIComponent(id)}/exec?stream=1`;
    const body = Buffer.from(JSON.stringify({ command, ...rest }));
    const headers: Record<string, string> = { ...authHeaders(this.auth, createHash("sha256").update(body).digest("hex")), "content-type": "application/json" };
    const response = await this.send("POST", path, body, headers);
    if (response.statusCode >= 400) {
      const text = Buffer.from(await response.body.arrayBuffer()).toString("utf8");
      let parsed: { error?: string; message?: string } = {};
      try {
        parsed = JSON.parse(text) as typeof parsed;
      } catch {
        // not JSON: keep the text
      }
      throw new ClientError(response.statusCode, parsed.error ?? "error", `POST ${path}: ${response.statusCode} ${parsed.message ?? text.slice(0, 300)}`);
    }
    let pending = "";
    // A multi-byte character may be split across chunks.
    const decoder = new TextDecoder();
    let result: Omit<SlotExecResult, "stdout" | "stderr"> | null = null;
    const line = (text: string) => {
      if (text.trim() === "") return;
      const value = JSON.parse(text) as Record<string, unknown>;
      if (typeof value.stdout === "string") onStdout?.(value.stdout);
      else if (typeof value.stderr === "string") onStderr?.(value.stderr);
      else if (typeof value.error === "string") throw new ClientError(response.statusCode, value.error, `POST ${path}: ${String(value.message ?? value.error)}`);
      else result = SlotExecResult.omit({ stdout: true, stderr: true }).parse(value);
    };
    for await (const chunk of response.body) {
      pending += decoder.decode(chunk as Buffer, { stream: true });
      let at: number;
      while ((at = pending.indexOf("\n")) >= 0) {
        line(pending.slice(0, at));
        pending = pending.slice(at + 1);
      }
    }
    line(pending + decoder.decode());
    if (result === null) throw new ClientError(response.statusCode, "bad_response", `POST ${path}: the stream ended without a result line`);
    return result;
  }

  /** One signed request; JSON in and out (raw bytes with `raw`). Error answers throw ClientError. */
  async call(method: Method, path: string, json?: unknown, raw?: Uint8Array): Promise<unknown> {
    const body = raw ? Buffer.from(raw) : json === undefined ? undefined : Buffer.from(JSON.stringify(json));
    const headers: Record<string, string> = { ...authHeaders(this.auth, createHash("sha256").update(body ?? Buffer.alloc(0)).digest("hex")) };
    if (body) headers["content-type"] = raw ? "application/octet-stream" : "application/json";
    const response = await this.send(method, path, body, headers);
    const bytes = Buffer.from(await response.body.arrayBuffer());
    if (response.statusCode >= 400) {
      let code = "error";
      let message = bytes.toString("utf8").slice(0, 300);
      try {
        const parsed = JSON.parse(bytes.toString("utf8")) as { error?: string; message?: string };
        code = parsed.error ?? code;
        message = parsed.message ?? message;
      } catch {
        // not JSON: keep the text
      }
      const error = new ClientError(response.statusCode, code, `${method} ${path}: ${response.statusCode} ${message}`);
      const retryAfter = Number(response.headers["retry-after"]);
      if (Number.isFinite(retryAfter) && retryAfter >= 0) error.retryAfterSec = retryAfter;
      throw error;
    }
    if (bytes.length === 0) return null;
    return String(response.headers["content-type"] ?? "").includes("application/json") ? JSON.parse(bytes.toString("utf8")) : bytes;
  }
}

/** A slot you hold; every call after release() is a 404. */
export class Slot {
  readonly id: string;
  readonly sandboxId: string;
  readonly workdir: string;
  readonly expiresAt: string;

  constructor(
    private readonly client: SlotsClient,
    created: SlotCreated,
  ) {
    this.id = created.slot_id;
    this.sandboxId = created.sandbox_id;
    this.workdir = created.workdir;
    this.expiresAt = created.expires_at;
  }

  private path(suffix = ""): string {
    return `/v1/slots/${encodeURIComponent(this.id)}${suffix}`;
  }

  /** A shell string (`sh -c`) or an argv array. */
  async exec(command: string | string[], options: SlotExecOptions = {}): Promise<SlotExecResult> {
    return SlotExecResult.parse(await this.client.call("POST", this.path("/exec"), { command, ...options }));
  }

  async batch(commands: (string | string[] | ({ command: string | string[] } & SlotExecOptions))[]): Promise<SlotExecResult[]> {
    const answer = z.object({ results: z.array(SlotExecResult) }).parse(await this.client.call("POST", this.path("/batch"), { commands }));
    return answer.results;
  }

  async writeFile(path: string, data: string | Uint8Array): Promise<void> {
    await this.client.call("PUT", `${this.path("/files")}?path=${encodeURIComponent(path)}`, undefined, typeof data === "string" ? Buffer.from(data) : data);
  }

  /** The file's bytes, or null when it does not exist. */
  async readFile(path: string): Promise<Buffer | null> {
    try {
      const answer = await this.client.call("GET", `${this.path("/files")}?path=${encodeURIComponent(path)}`);
      return Buffer.isBuffer(answer) ? answer : Buffer.alloc(0);
    } catch (error) {
      if (error instanceof ClientError && error.statusCode === 404 && error.code === "not_found") return null;
      throw error;
    }
  }

  async verify(): Promise<SlotVerifyResult> {
    return SlotVerifyResult.parse(await this.client.call("POST", this.path("/verify"), {}));
  }

  async release(options: { reset?: boolean } = {}): Promise<void> {
    await this.client.call("DELETE", `${this.path()}?reset=${options.reset === false ? "false" : "true"}`);
  }
}
