import { createHash } from "node:crypto";
import { availableParallelism, totalmem } from "node:os";
import { raceSignal } from "@proctor/sandbox";
import { dockerfileInstructions } from "@proctor/schema";

/** Memory one parallel build may count on, for the default number of builds at once. */
const MEMORY_PER_BUILD = 2 * 1024 ** 3;

/** Builds at once by default: one per CPU, at most one per 2 GB of memory, at least one. */
export function defaultBuildConcurrency(): number {
  return Math.max(1, Math.min(availableParallelism(), Math.floor(totalmem() / MEMORY_PER_BUILD)));
}

/** At most `size` holders at once, served first come first served; a waiter whose signal aborts leaves the queue. */
export class BuildSlots {
  private active = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(readonly size: number) {
    if (!(size >= 1)) throw new RangeError(`build slots must be at least 1, got ${size}`);
  }

  /** Resolves once a slot is held; call the returned function to give it back (safe twice). */
  async acquire(signal?: AbortSignal): Promise<() => void> {
    signal?.throwIfAborted();
    if (this.active < this.size) {
      this.active++;
      return this.releaser();
    }
    let wake!: () => void;
    const turn = new Promise<void>((resolve) => {
      wake = resolve;
    });
    this.waiting.push(wake);
    try {
      await raceSignal(turn, signal);
    } catch (error) {
      const at = this.waiting.indexOf(wake);
      if (at >= 0) this.waiting.splice(at, 1);
      else this.handOn(); // woken and aborted at once: the slot passed to us goes to the next one
      throw error;
    }
    return this.releaser();
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.handOn();
    };
  }

  /** The slot of a holder that leaves: to the first waiter (active stays the same), else free. */
  private handOn(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.active--;
  }
}

/**
 * Lets one build at a time run a shared Dockerfile prefix: the first build with a prefix key
 * leads; later ones wait until the leader has committed the prefix (then they find every prefix
 * step in Docker's build cache) or has given up (then one of them leads). It only orders builds:
 * what each build makes is what it would make without it.
 */
export class PrefixGate {
  private readonly leaders = new Map<string, Promise<boolean>>();

  /**
   * Resolves when the caller may build: either as the leader of `key`, with a function to call
   * with true once the prefix is committed (or the build succeeded) and false when the build
   * ended without it (failed, cancelled); or after another leader committed the prefix, with a
   * function that does nothing. Rejects only when `signal` aborts.
   */
  async enter(key: string, signal?: AbortSignal): Promise<{ leader: boolean; done: (committed: boolean) => void }> {
    for (;;) {
      signal?.throwIfAborted();
      const current = this.leaders.get(key);
      if (current === undefined) {
        let settle!: (committed: boolean) => void;
        const outcome = new Promise<boolean>((resolve) => {
          settle = resolve;
        });
        this.leaders.set(key, outcome);
        let settled = false;
        return {
          leader: true,
          done: (committed) => {
            if (settled) return;
            settled = true;
            if (this.leaders.get(key) === outcome) this.leaders.delete(key);
            settle(committed);
          },
        };
      }
      if (await raceSignal(current, signal)) return { leader: false, done: () => undefined };
    }
  }
}

/** The cache-shareable start of a Dockerfile: its key, and how many build steps it spans. */
export interface DockerfilePrefix {
  key: string;
  steps: number;
}

/**
 * The steps at the start of a Dockerfile that need nothing from the build context: global ARGs,
 * the first FROM and every instruction after it up to the first COPY or ADD (their inputs are
 * context files), the next FROM, or the end. Two builds whose prefixes (and build args and
 * network) match run identical steps, which Docker's build cache can share once one of them has
 * committed them. Null when the prefix has no RUN step (nothing worth waiting for).
 */
export function dockerfilePrefix(dockerfile: string, options: { buildArgs?: Record<string, string>; network?: boolean } = {}): DockerfilePrefix | null {
  const instructions = dockerfileInstructions(dockerfile);
  const prefix: string[] = [];
  let froms = 0;
  for (const instruction of instructions) {
    const word = instruction.split(/\s/, 1)[0]?.toUpperCase() ?? "";
    if (word === "FROM" && ++froms > 1) break;
    if (word === "COPY" || word === "ADD") break;
    // ONBUILD triggers run in builds FROM the image, not this one; before FROM only ARG is allowed.
    if (froms === 0 && word !== "ARG") return null;
    prefix.push(`${word} ${instruction.slice(word.length).trim()}`);
  }
  if (froms === 0 || !prefix.some((line) => line.startsWith("RUN "))) return null;
  const args = Object.entries(options.buildArgs ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const key = createHash("sha256")
    .update(JSON.stringify({ prefix, args, network: options.network !== false }))
    .digest("hex");
  return { key, steps: prefix.length };
}

/** Whether a classic-builder log line starts step `step` (`Step 3/7 : RUN ...`). */
export function startsStep(line: string, step: number): boolean {
  return line.startsWith(`Step ${step}/`);
}
