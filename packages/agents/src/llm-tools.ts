import { posix } from "node:path";
import type { ToolCall, ToolDefinition } from "@proctor/llm";
import type { Sandbox } from "@proctor/sandbox";
import { z } from "zod";

/** What the model sees of one command's output: the first and last bytes, the middle cut. */
export const DEFAULT_TOOL_OUTPUT_BYTES = 16 * 1024;
/** A bash call without timeout_sec gets this much (never past the agent's deadline). */
export const DEFAULT_BASH_TIMEOUT_SEC = 180;

export const LLM_TOOLS: readonly ToolDefinition[] = [
  {
    type: "function",
    function: {
      name: "bash",
      description:
        "Run a shell command (bash -c) in the task's working directory and get its exit code and output (stdout and stderr together; long output keeps its start and end). Each call is a new shell: cd and exported variables do not carry over. Do not start interactive programs.",
      parameters: {
        type: "object",
        properties: {
          command: { type: "string", description: "The command line to run." },
          timeout_sec: { type: "number", description: `Kill the command after this many seconds (default ${DEFAULT_BASH_TIMEOUT_SEC}).` },
        },
        required: ["command"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "read_file",
      description: "Read a text file. Relative paths are taken from the working directory.",
      parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
    },
  },
  {
    type: "function",
    function: {
      name: "write_file",
      description: "Create or overwrite a file with the given content (parent directories are created). Relative paths are taken from the working directory.",
      parameters: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } }, required: ["path", "content"] },
    },
  },
  {
    type: "function",
    function: {
      name: "submit",
      description: "Say that the task is done. Your work is then checked by the task's tests; you get no further turns.",
      parameters: { type: "object", properties: {} },
    },
  },
];

const ARGS = {
  bash: z.object({ command: z.string().min(1), timeout_sec: z.number().positive().optional() }),
  read_file: z.object({ path: z.string().min(1) }),
  write_file: z.object({ path: z.string().min(1), content: z.string() }),
  submit: z.object({}).passthrough(),
} as const;
type ToolName = keyof typeof ARGS;

export type ParsedToolCall =
  | { ok: true; id: string; name: "bash"; args: z.infer<typeof ARGS.bash> }
  | { ok: true; id: string; name: "read_file"; args: z.infer<typeof ARGS.read_file> }
  | { ok: true; id: string; name: "write_file"; args: z.infer<typeof ARGS.write_file> }
  | { ok: true; id: string; name: "submit"; args: Record<string, unknown> }
  | { ok: false; id: string; name: string; error: string };

/**
 * Check one tool call: known tool, arguments that are a JSON object, required fields present.
 * A bad call comes back as `{ ok: false, error }`, the text of the tool message the model gets.
 */
export function parseToolCall(call: ToolCall): ParsedToolCall {
  const { id } = call;
  const name = call.function.name;
  if (!(name in ARGS)) {
    return { ok: false, id, name, error: `error: unknown tool ${JSON.stringify(name)}; the tools are ${Object.keys(ARGS).join(", ")}` };
  }
  let raw: unknown;
  const text = call.function.arguments.trim();
  try {
    raw = text === "" ? {} : JSON.parse(text);
  } catch (error) {
    return { ok: false, id, name, error: `error: the arguments of ${name} are not valid JSON (${(error as Error).message}); send a JSON object such as ${example(name as ToolName)}` };
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    return { ok: false, id, name, error: `error: the arguments of ${name} must be a JSON object such as ${example(name as ToolName)}` };
  }
  const parsed = ARGS[name as ToolName].safeParse(raw);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join(".") || "(arguments)"}: ${i.code === "invalid_type" && (raw as Record<string, unknown>)[String(i.path[0])] === undefined ? "missing" : i.message}`);
    return { ok: false, id, name, error: `error: bad arguments for ${name}: ${problems.join("; ")}; expected ${example(name as ToolName)}` };
  }
  return { ok: true, id, name, args: parsed.data } as ParsedToolCall;
}

function example(name: ToolName): string {
  switch (name) {
    case "bash":
      return '{"command": "ls -la", "timeout_sec": 60}';
    case "read_file":
      return '{"path": "src/main.py"}';
    case "write_file":
      return '{"path": "notes.txt", "content": "..."}';
    case "submit":
      return "{}";
  }
}

/** Keeps the first and last `limit / 2` bytes of a stream; counts what was dropped between. */
export class HeadTail {
  private head: Buffer[] = [];
  private headBytes = 0;
  private tail: Buffer[] = [];
  private tailBytes = 0;
  total = 0;
  constructor(private readonly limit: number) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    const half = Math.floor(this.limit / 2);
    if (this.headBytes < half) {
      const take = chunk.subarray(0, half - this.headBytes);
      this.head.push(take);
      this.headBytes += take.length;
      chunk = chunk.subarray(take.length);
    }
    if (chunk.length === 0) return;
    this.tail.push(chunk);
    this.tailBytes += chunk.length;
    while (this.tailBytes - (this.tail[0]?.length ?? 0) >= half && this.tail.length > 1) {
      this.tailBytes -= this.tail.shift()?.length ?? 0;
    }
  }

  /** The kept text, with a line saying how many bytes were cut from the middle. */
  text(): string {
    const half = Math.floor(this.limit / 2);
    const head = Buffer.concat(this.head);
    let tail = Buffer.concat(this.tail);
    if (this.total <= this.limit) return Buffer.concat([head, tail]).toString("utf8");
    tail = tail.subarray(Math.max(0, tail.length - half));
    const cut = this.total - head.length - tail.length;
    return `${head.toString("utf8")}\n[... ${cut} bytes of output cut here (${this.total} in all); the start and the end are kept ...]\n${tail.toString("utf8")}`;
  }
}

export interface ToolEnv {
  sandbox: Sandbox;
  signal: AbortSignal;
  deadlineMs: number;
  maxOutputBytes: number;
}

/** A tool's answer: the text for the model plus what the trajectory records. */
export interface ToolOutcome {
  content: string;
  exitCode?: number | null;
  timedOut?: boolean;
  outputBytes?: number;
  truncated?: boolean;
}

function resolvePath(sandbox: Sandbox, path: string): string {
  return posix.isAbsolute(path) ? posix.normalize(path) : posix.join(sandbox.workdir, path);
}

/** Run one checked tool call in the sandbox. Sandbox failures become error text, not exceptions. */
export async function runTool(call: Exclude<ParsedToolCall, { ok: false }>, env: ToolEnv): Promise<ToolOutcome> {
  const { sandbox } = env;
  switch (call.name) {
    case "bash": {
      const left = Math.max(1, env.deadlineMs - Date.now());
      const timeoutMs = Math.min(left, Math.round((call.args.timeout_sec ?? DEFAULT_BASH_TIMEOUT_SEC) * 1000));
      const out = new HeadTail(env.maxOutputBytes);
      const result = await sandbox.exec(
        // bash -c where the image has bash (what the tool promises), else sh -c; the command is $0, never re-quoted.
        ["/bin/sh", "-c", 'if command -v bash >/dev/null 2>&1; then exec bash -c "$0"; else exec sh -c "$0"; fi', call.args.command],
        { cwd: sandbox.workdir, timeoutMs, signal: env.signal, onStdout: (c) => out.push(c), onStderr: (c) => out.push(c), maxOutputBytes: 1024 },
      );
      const status = result.timedOut
        ? `[timed out after ${Math.round(timeoutMs / 1000)} s; the command was killed]`
        : result.aborted
          ? "[aborted]"
          : `[exit code ${result.exitCode}]`;
      const text = out.text();
      return {
        content: `${text}${text.length > 0 && !text.endsWith("\n") ? "\n" : ""}${status}`,
        exitCode: result.timedOut || result.aborted ? null : result.exitCode,
        timedOut: result.timedOut,
        outputBytes: out.total,
        truncated: out.total > env.maxOutputBytes,
      };
    }
    case "read_file": {
      const path = resolvePath(sandbox, call.args.path);
      const data = await sandbox.readFile(path, { maxBytes: 64 * 1024 * 1024 }).catch((error: unknown) => error as Error);
      if (data instanceof Error) return { content: `error: cannot read ${path}: ${data.message}` };
      if (data === null) return { content: `error: ${path} does not exist` };
      const out = new HeadTail(env.maxOutputBytes);
      out.push(data);
      return { content: out.text(), outputBytes: data.length, truncated: data.length > env.maxOutputBytes };
    }
    case "write_file": {
      const path = resolvePath(sandbox, call.args.path);
      const written = await sandbox.writeFile(path, call.args.content).catch((error: unknown) => error as Error);
      if (written instanceof Error) return { content: `error: cannot write ${path}: ${written.message}` };
      return { content: `wrote ${Buffer.byteLength(call.args.content)} bytes to ${path}` };
    }
    case "submit":
      return { content: "submitted: the task's tests run next" };
  }
}
