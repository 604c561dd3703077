import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { SlotService, SlotServiceError, type SlotEntry, type SlotServiceOptions } from "@proctor/engine";
import { SandboxError, type ExecCommand, type ExecResult } from "@proctor/sandbox";
import { z } from "zod";
import { principalKey, type RequestAuthenticator } from "@proctor/auth";
import { BadRequestError, NotFoundError, ServerError } from "./errors";

/**
 * The slots API (DESIGN.md "Slots"): `/v1/slots...` and `/v1/pool`, thin routes over the engine's
 * SlotService (pools per credential and image, ownership, expiry, verify). A slot belongs to the
 * credential that created it: anyone else gets 403 (an admin may act on any). Paths are sandbox
 * paths, refused when they hold `..`; no route ever reads a host path named by the caller.
 */
export { SlotService };
export type SlotsOptions = SlotServiceOptions;

/** Per stream cap of an exec's response (default 1 MiB, at most 16 MiB with `max_output_bytes`). */
const DEFAULT_OUTPUT_BYTES = 1024 * 1024;
const MAX_OUTPUT_BYTES = 16 * 1024 * 1024;
/** A streaming client that lets this much pile up unread loses chunks (marked truncated), never the server's memory. */
const STREAM_BACKLOG_BYTES = 8 * 1024 * 1024;
const JSON_BODY_LIMIT = 1024 * 1024;

const Command = z.union([z.string().min(1), z.array(z.string()).min(1)]);
const ExecBody = z.object({
  command: Command,
  timeout_s: z.number().positive().max(24 * 3600).optional(),
  env: z.record(z.string(), z.string()).optional(),
  cwd: z.string().min(1).optional(),
  stdin: z.string().optional(),
  max_output_bytes: z.number().int().min(0).max(MAX_OUTPUT_BYTES).optional(),
});
type ExecBody = z.infer<typeof ExecBody>;
const BatchBody = z.object({ commands: z.array(z.union([Command, ExecBody])).min(1).max(1000) });
const CreateBody = z.object({
  image: z.string().min(1).optional(),
  task: z.string().min(1).optional(),
  repo: z.object({ name: z.string().regex(/^[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)?$/, "must be <name> or <owner>/<name>"), commit: z.string().regex(/^[0-9a-fA-F]{4,64}$/, "must be a hex commit id") }).optional(),
  env: z.record(z.string(), z.string()).optional(),
  ttl_s: z.number().positive().optional(),
});

function parseJson<T>(schema: z.ZodType<T>, body: unknown, what: string): T {
  let value: unknown = body;
  if (Buffer.isBuffer(body)) {
    if (body.length === 0) value = {};
    else {
      try {
        value = JSON.parse(body.toString("utf8"));
      } catch {
        throw new BadRequestError(`${what}: the body is not valid JSON`);
      }
    }
  } else if (body === undefined || body === null) value = {};
  const result = schema.safeParse(value);
  if (!result.success) {
    const issue = result.error.issues[0];
    throw new BadRequestError(`${what}: field ${issue?.path.join(".") || "(body)"}: ${issue?.message ?? "invalid"}`);
  }
  return result.data;
}

function toCommand(command: string | string[]): ExecCommand {
  return typeof command === "string" ? { shell: command } : command;
}

function execResponse(result: ExecResult, extraTruncated = false) {
  return {
    exit_code: result.exitCode,
    stdout: result.stdout,
    stderr: result.stderr,
    timed_out: result.timedOut,
    duration_ms: Math.round(result.durationMs),
    truncated: result.truncated || extraTruncated,
  };
}

/** The service's refusals as HTTP answers (same status and code). */
function httpError(error: unknown): Error {
  if (!(error instanceof SlotServiceError)) return error instanceof Error ? error : new Error(String(error));
  const answer = new ServerError(error.status, error.code, error.message, { cause: error });
  answer.retryAfterSec = error.retryAfterSec;
  return answer;
}

/** A service call, its errors as HTTP answers (a sandbox error of `entry` first goes through translate). */
async function call<T>(service: SlotService, fn: () => Promise<T>, entry?: SlotEntry): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    throw httpError(service.translate(error, entry));
  }
}

/** Registers the slot routes on the server's app (auth hooks already apply to them). */
export function registerSlotRoutes(app: FastifyInstance, service: SlotService, auth: RequestAuthenticator): void {
  const identityOf = (request: FastifyRequest) => request.proctorIdentity;
  const own = (request: FastifyRequest) => {
    const identity = identityOf(request);
    try {
      return service.entry((request.params as { id: string }).id, (owner) => auth.canAccess(identity, owner));
    } catch (error) {
      throw httpError(error);
    }
  };

  app.post("/v1/slots", { bodyLimit: JSON_BODY_LIMIT }, async (request, reply) => {
    const body = parseJson(CreateBody, request.body, "POST /v1/slots");
    const owner = principalKey(identityOf(request)) === null ? null : identityOf(request);
    const { slot } = await call(service, () => service.create(owner, { image: body.image, task: body.task, repo: body.repo, env: body.env, ttlSec: body.ttl_s }));
    return reply.code(201).send({ slot_id: slot.id, sandbox_id: slot.sandboxId, workdir: slot.workdir, expires_at: new Date(slot.expiresAt).toISOString() });
  });

  app.post("/v1/slots/:id/exec", { bodyLimit: JSON_BODY_LIMIT }, async (request, reply) => {
    const entry = own(request);
    const body = parseJson(ExecBody, request.body, "POST /v1/slots/:id/exec");
    const stream = (request.query as { stream?: string }).stream;
    if (stream === "1" || stream === "true") return streamExec(service, entry, body, reply);
    return execResponse(await call(service, () => entry.slot.exec(toCommand(body.command), execOptions(body)), entry));
  });

  app.post("/v1/slots/:id/batch", { bodyLimit: JSON_BODY_LIMIT }, async (request) => {
    const entry = own(request);
    const body = parseJson(BatchBody, request.body, "POST /v1/slots/:id/batch");
    const results = [];
    for (const item of body.commands) {
      const spec: ExecBody = typeof item === "string" || Array.isArray(item) ? { command: item } : item;
      results.push(execResponse(await call(service, () => entry.slot.exec(toCommand(spec.command), execOptions(spec)), entry)));
    }
    return { results };
  });

  // Files: the raw body, up to maxFileBytes (a route-level limit over the app's small default).
  app.put("/v1/slots/:id/files", { bodyLimit: service.maxFileBytes }, async (request, reply) => {
    const entry = own(request);
    const path = filePath(request);
    const data = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
    await call(service, () => entry.slot.writeFile(path, data), entry);
    return reply.code(204).send();
  });

  app.get("/v1/slots/:id/files", async (request, reply) => {
    const entry = own(request);
    const path = filePath(request);
    let data: Buffer | null;
    try {
      data = await entry.slot.readFile(path, { maxBytes: service.maxFileBytes });
    } catch (error) {
      if (error instanceof SandboxError && /limit \(maxBytes\)/.test(error.message)) {
        throw new ServerError(413, "payload_too_large", `${path} is larger than the server's file limit of ${service.maxFileBytes} bytes`);
      }
      if (error instanceof SandboxError && /is a directory|not a file/.test(error.message)) throw new BadRequestError(`query parameter path: ${path} is not a regular file`);
      throw httpError(service.translate(error, entry));
    }
    if (data === null) throw new NotFoundError(`no file ${path} in slot ${entry.slot.id}`);
    return reply.code(200).header("content-type", "application/octet-stream").send(data);
  });

  app.post("/v1/slots/:id/verify", async (request) => {
    const entry = own(request);
    const result = await call(service, () => service.verify(entry), entry);
    return { reward: result.reward, resolved: result.resolved, tests: result.tests, exit_code: result.exitCode, timed_out: result.timedOut, output: result.output, error: result.error };
  });

  app.delete("/v1/slots/:id", async (request, reply) => {
    const entry = own(request);
    const reset = (request.query as { reset?: string }).reset;
    if (reset !== undefined && reset !== "true" && reset !== "false") throw new BadRequestError(`query parameter reset must be true or false, got "${reset}"`);
    await call(service, () => service.release(entry, reset !== "false"));
    return reply.code(204).send();
  });

  app.get("/v1/pool", async () => {
    const s = service.stats();
    return { sandboxes: s.sandboxes, slots_total: s.slotsTotal, slots_busy: s.slotsBusy, waiting: s.waiting, quarantined: s.quarantined };
  });
}

function filePath(request: FastifyRequest): string {
  const path = (request.query as { path?: unknown }).path;
  if (typeof path !== "string" || path === "") throw new BadRequestError("query parameter path is required (a path in the slot's workdir, or an absolute sandbox path)");
  return path;
}

function execOptions(body: ExecBody) {
  return {
    timeoutMs: body.timeout_s === undefined ? undefined : Math.round(body.timeout_s * 1000),
    env: body.env,
    cwd: body.cwd,
    stdin: body.stdin,
    maxOutputBytes: body.max_output_bytes ?? DEFAULT_OUTPUT_BYTES,
  };
}

/**
 * NDJSON: `{"stdout": "..."}` / `{"stderr": "..."}` lines as the command writes, then the result
 * line (`exit_code`, `timed_out`, `duration_ms`, `truncated`) without the output again.
 */
async function streamExec(service: SlotService, entry: SlotEntry, body: ExecBody, reply: FastifyReply): Promise<FastifyReply> {
  reply.hijack();
  const raw = reply.raw;
  raw.writeHead(200, { "content-type": "application/x-ndjson" });
  let dropped = false;
  const write = (line: object) => {
    if (raw.writableLength > STREAM_BACKLOG_BYTES) {
      dropped = true;
      return;
    }
    raw.write(`${JSON.stringify(line)}\n`);
  };
  const abort = new AbortController();
  raw.once("close", () => abort.abort());
  try {
    const result = await entry.slot.exec(toCommand(body.command), {
      ...execOptions(body),
      // Streamed: the result keeps nothing more.
      maxOutputBytes: 0,
      signal: abort.signal,
      onStdout: (chunk) => write({ stdout: chunk.toString("utf8") }),
      onStderr: (chunk) => write({ stderr: chunk.toString("utf8") }),
    });
    const { stdout: _o, stderr: _e, ...rest } = execResponse(result, dropped);
    write({ ...rest, truncated: dropped });
  } catch (error) {
    const translated = httpError(service.translate(error, entry));
    write({ error: translated instanceof ServerError ? translated.code : "internal", message: translated.message });
  }
  raw.end();
  return reply;
}
