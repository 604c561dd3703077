import { AgentConfigError, RunFatalAgentError } from "@proctor/agents";
import { ClientError } from "@proctor/client";
import { EngineError, RunStorageError } from "@proctor/engine";
import { RuntimeUnavailableError, SandboxConfigError } from "@proctor/sandbox";
import { EXIT_FATAL_AGENT } from "./errors";

/** Errors the packages raise, as one line and an exit code; null for anything else. */
export function explainKnownError(error: unknown): { line: string; code: number } | null {
  // The agent cannot work at all (a rejected model key, an unknown model): finished trials are kept.
  if (error instanceof RunFatalAgentError) return { line: `the run stopped: ${error.message}`, code: EXIT_FATAL_AGENT };
  // Errors the engine raises before any trial starts: the user's input, or the runtime.
  if (error instanceof RunStorageError) return { line: error.message, code: 1 };
  if (error instanceof EngineError || error instanceof AgentConfigError) return { line: error.message, code: 2 };
  if (error instanceof ClientError) return { line: explainClientError(error), code: 1 };
  // A runtime set up wrongly (a bad PROCTOR_* variable) is bad usage; one that does not answer is exit 3.
  if (error instanceof SandboxConfigError) return { line: error.message, code: 2 };
  if (error instanceof RuntimeUnavailableError) return { line: error.message, code: 3 };
  return null;
}

/** A server's refusal as one line: its answer, then what to do about it when the answer does not say. */
function explainClientError(error: ClientError): string {
  const hint: Record<number, string> = {
    401: "the server did not accept these credentials: pass --token TOKEN (or PROCTOR_TOKEN) or a hotkey it allows (--key-file, PROCTOR_HOTKEY_URI)",
    403: "these credentials may not do this on the server: use the ones that submitted the batch, or an admin's",
  };
  const what = error.code === "unreachable" ? undefined : hint[error.statusCode];
  return what ? `${error.message}; ${what}` : error.message;
}
