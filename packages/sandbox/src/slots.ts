import { randomUUID } from "node:crypto";
import { posix } from "node:path";
import { SandboxError, TransferError } from "./errors";
import type { ExecCommand, ExecOptions, ExecResult, Sandbox, SandboxCreateOptions, SandboxRuntime } from "./types";
import type { Logger } from "@proctor/schema";
import { silentLogger } from "@proctor/schema";

/**
 * Slots: many short sessions in few sandboxes (RL rollouts, data generation). A SlotPool keeps
 * up to `maxSandboxes` sandboxes of one image, each split into `slotsPerSandbox` slots. A slot is
 * a workdir of its own (a git worktree at a commit when it has a repo, else an empty dir) plus
 * the processes its execs started (found by the PROCTOR_SLOT_ID env var every exec carries).
 * Releasing with reset kills those processes and restores the workdir; a reset that cannot be
 * confirmed quarantines the whole sandbox (killed and replaced), never hands out a dirty slot.
 *
 * Slots of one sandbox share its kernel namespaces and user (root): they are kept apart by
 * directory and process group, which protects one rollout from another's mistakes, not from a
 * hostile one. Give untrusted code `slotsPerSandbox: 1`.
 */

/** Env var every slot exec carries; reset kills the processes that have it. */
export const SLOT_ENV = "PROCTOR_SLOT_ID";
/** Slot workdirs live under this directory of the sandbox's workdir. */
const SLOTS_DIR = ".proctor-slots";
const HOUSEKEEPING_MS = 60_000;

export interface SlotPoolOptions {
  runtime: SandboxRuntime;
  image: string;
  /** Slots per sandbox (default 4). */
  slotsPerSandbox?: number;
  /** Sandboxes kept started even when no slot is taken (default 0). */
  minSandboxes?: number;
  /** Sandboxes at most (default 4). */
  maxSandboxes?: number;
  /** How long acquire() waits for a free slot before SlotPoolExhaustedError (default 30 s). */
  acquireTimeoutMs?: number;
  /** A held slot with no exec or file call for this long is reclaimed (default 10 min). */
  idleTimeoutMs?: number;
  /** A held slot is reclaimed this long after it was acquired, in use or not (default 1 h). */
  maxLifetimeMs?: number;
  /** Passed to runtime.create for every sandbox (limits, network, labels, env). */
  sandbox?: Omit<SandboxCreateOptions, "image" | "signal">;
  logger?: Logger;
}

/** A repository a slot is checked out from: a bare (or normal) git repository on the host, and a commit. */
export interface SlotRepo {
  /** Host path of the repository (copied into each sandbox once, as its bare cache). */
  path: string;
  commit: string;
}

export interface SlotRequest {
  /** Slots with the same key prefer sandboxes that already served it (e.g. `repo@commit`). */
  key?: string;
  repo?: SlotRepo;
  /** Added to every exec's env. */
  env?: Record<string, string>;
  /** Reclaimed this long after acquisition (at most the pool's maxLifetimeMs). */
  ttlMs?: number;
}

export interface SlotPoolStats {
  sandboxes: number;
  /** Sandboxes being started. */
  starting: number;
  slotsTotal: number;
  slotsBusy: number;
  /** acquire() calls waiting for a slot. */
  waiting: number;
  /** Sandboxes quarantined (a reset could not be confirmed, or it died) since the pool started. */
  quarantined: number;
}

/** acquire() found no free slot within acquireTimeoutMs; try again after `retryAfterMs`. */
export class SlotPoolExhaustedError extends SandboxError {
  override name = "SlotPoolExhaustedError";
  constructor(message: string, readonly retryAfterMs: number) {
    super(message);
  }
}

/** The slot was released, expired (idle or lifetime) or lost with its sandbox; acquire another. */
export class SlotGoneError extends SandboxError {
  override name = "SlotGoneError";
  constructor(message: string, readonly reason: "released" | "expired" | "lost" | "closed", options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** A slot path that leaves the sandbox's tree (`..`, NUL) or is not a string. */
export class SlotPathError extends SandboxError {
  override name = "SlotPathError";
}

interface Member {
  sandbox: Sandbox;
  /** Slot index -> the holder, or null when free. */
  slots: (Slot | null)[];
  /** Keys (repos) this sandbox has served; repo caches copied in. */
  keys: Set<string>;
  repos: Map<string, Promise<string>>;
  /** Per slot index: what its workdir was last confirmed to hold (stateOf), so an identical next slot skips preparing. */
  prepared: (string | null)[];
  /** No new slots: quarantined, or a slot was released without reset; killed once its slots are free. */
  retiring: boolean;
  /**
   * The sandbox's worktree adds, removes and prunes, one after another: git does not lock a
   * repo's worktree list, and an add or prune beside another slot's add reads that add's
   * half-written entry ("failed to read .git/worktrees/1/commondir").
   */
  worktreeChanges: Promise<void>;
}

interface Waiter {
  request: SlotRequest;
  resolve: (slot: Slot) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

/** One slot handed out by SlotPool.acquire. Use it until release(); then every call throws SlotGoneError. */
export class Slot {
  readonly id = `slot-${randomUUID()}`;
  readonly acquiredAt = Date.now();
  lastUsedAt = Date.now();
  gone: SlotGoneError | null = null;
  /** Execs and file calls in flight (an idle slot has none). */
  busy = 0;

  constructor(
    readonly sandbox: Sandbox,
    readonly index: number,
    /** Sandbox path of the slot's workdir. */
    readonly workdir: string,
    readonly request: SlotRequest,
    readonly expiresAt: number,
  ) {}

  get sandboxId(): string {
    return this.sandbox.id;
  }

  /** Runs in the slot's workdir (relative `cwd` is taken from it), in a process group of its own. */
  async exec(command: ExecCommand, options: ExecOptions = {}): Promise<ExecResult> {
    return this.use(() =>
      this.sandbox.exec(command, {
        ...options,
        cwd: options.cwd === undefined ? this.workdir : this.path(options.cwd),
        env: { ...this.request.env, ...options.env, [SLOT_ENV]: this.id },
        // Slot execs run as the image's user; `user` would also route them off the fast channel.
        user: undefined,
      }),
    );
  }

  /**
   * Writes a file (parents created). Where the sandbox has its own filesystem this is an exec of
   * the trusted busybox with the data on stdin (the exec channel's fast path, the slot's own
   * processes could touch the file anyway); elsewhere the runtime's writeFile.
   */
  async writeFile(path: string, data: string | Uint8Array, options: { mode?: number } = {}): Promise<void> {
    const target = this.path(path);
    if (!this.sandbox.capabilities.files) return this.use(() => this.sandbox.writeFile(target, data, options));
    const mode = options.mode === undefined ? "" : options.mode.toString(8);
    const result = await this.exec([...this.sandbox.trustedTools, "sh", "-c", WRITE_SCRIPT, "proctor-write", target, mode], { stdin: typeof data === "string" ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength) });
    if (result.exitCode !== 0) throw new TransferError(`writing ${target} in slot ${this.id} failed (exit ${result.exitCode}): ${result.stderr.trim().slice(-300)}`, target);
  }

  /** The file's bytes, or null when absent; throws past maxBytes (default 10 MiB). */
  async readFile(path: string, options: { maxBytes?: number } = {}): Promise<Buffer | null> {
    const target = this.path(path);
    if (!this.sandbox.capabilities.files) return this.use(() => this.sandbox.readFile(target, options));
    const maxBytes = options.maxBytes ?? 10 * 1024 * 1024;
    const chunks: Buffer[] = [];
    let size = 0;
    const result = await this.exec([...this.sandbox.trustedTools, "sh", "-c", READ_SCRIPT, "proctor-read", target], {
      maxOutputBytes: 0,
      onStdout: (chunk) => {
        size += chunk.length;
        if (size > maxBytes) throw new TransferError(`readFile: ${target} is more than ${maxBytes} bytes, above the ${maxBytes} byte limit (maxBytes)`, target);
        chunks.push(Buffer.from(chunk));
      },
    });
    if (result.exitCode === 44) return null;
    if (result.exitCode === 45) throw new TransferError(`readFile: ${target} is not a file`, target);
    if (result.exitCode !== 0) throw new TransferError(`reading ${target} in slot ${this.id} failed (exit ${result.exitCode}): ${result.stderr.trim().slice(-300)}`, target);
    return Buffer.concat(chunks);
  }

  /**
   * The sandbox path of `path`: relative paths are taken from the slot's workdir, absolute ones
   * stay in the sandbox. `..` segments and NUL bytes are refused (SlotPathError).
   */
  path(path: string): string {
    if (typeof path !== "string" || path === "" || path.includes("\0")) throw new SlotPathError(`slot path must be a non-empty string without NUL bytes, got ${JSON.stringify(path)}`);
    if (path.split("/").includes("..")) throw new SlotPathError(`slot path ${JSON.stringify(path)} contains a ".." segment; give a path inside the slot's workdir (${this.workdir}) or another absolute sandbox path`);
    return path.startsWith("/") ? posix.normalize(path) : posix.join(this.workdir, path);
  }

  private async use<T>(run: () => Promise<T>): Promise<T> {
    if (this.gone) throw this.gone;
    this.busy++;
    this.lastUsedAt = Date.now();
    try {
      return await run();
    } finally {
      this.busy--;
      this.lastUsedAt = Date.now();
    }
  }
}

/** $1: path, $2: octal mode or "": the data comes on stdin. */
const WRITE_SCRIPT = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && { [ -z "$2" ] || chmod "$2" "$1"; }';
/** $1: path; exit 44 when absent, 45 when not a regular file. */
const READ_SCRIPT = '[ -e "$1" ] || [ -L "$1" ] || exit 44; [ -f "$1" ] || exit 45; exec cat -- "$1"';

export interface BatchItem {
  slot: Slot;
  command: ExecCommand;
  options?: ExecOptions;
}

/** What a request's workdir holds when prepared: a repo at a commit, or nothing. */
function stateOf(request: SlotRequest): string {
  return request.repo ? `${request.repo.path}\0${request.repo.commit}` : "";
}

/**
 * A slot's workdir relative to the sandbox's workdir. Housekeeping scripts run there and take
 * relative paths, so they work where sandbox paths are not host paths (the local runtime).
 */
function slotDir(index: number): string {
  return posix.join(SLOTS_DIR, String(index));
}

/**
 * Kills every process carrying `PROCTOR_SLOT_ID=$1` (stopped first, so a forking loop cannot
 * outrun it; one grep over every environ, not a process per pid) until a pass finds none, then
 * restores the slot's workdir ($2, relative): a git worktree is reset to its commit ($3) and
 * cleaned, then confirmed (HEAD is the commit, status shows nothing, ignored files included); a
 * plain dir is emptied and confirmed empty. Prints "ok" when all of it is confirmed.
 */
const RESET_SCRIPT = `
id="$1"; dir="$2"; commit="$3"; round=0
if [ -n "$id" ]; then
  while :; do
    round=$((round + 1))
    [ "$round" -gt 30 ] && { echo "processes of slot $id survived 30 kill rounds" >&2; exit 1; }
    victims=$(grep -l -s "${SLOT_ENV}=$id" /proc/[0-9]*/environ 2>/dev/null | sed 's|^/proc/||; s|/environ$||')
    [ -z "$victims" ] && break
    kill -STOP $victims 2>/dev/null
    kill -KILL $victims 2>/dev/null
    sleep 0.05 2>/dev/null || sleep 1
  done
fi
if [ -n "$commit" ]; then
  cd "$dir" || exit 1
  git reset -q --hard "$commit" && git clean -qffdx || exit 1
  [ "$(git rev-parse HEAD)" = "$(git rev-parse "$commit^{commit}")" ] || { echo "HEAD is not $commit" >&2; exit 1; }
  [ -z "$(git status --porcelain --ignored)" ] || { echo "worktree still dirty" >&2; exit 1; }
else
  rm -rf "$dir" && mkdir -p "$dir" || exit 1
  [ -z "$(ls -A "$dir")" ] || { echo "$dir is not empty" >&2; exit 1; }
fi
echo ok
`;

/** See the module comment. */
export class SlotPool {
  private readonly runtime: SandboxRuntime;
  private readonly image: string;
  readonly slotsPerSandbox: number;
  readonly minSandboxes: number;
  readonly maxSandboxes: number;
  readonly acquireTimeoutMs: number;
  readonly idleTimeoutMs: number;
  readonly maxLifetimeMs: number;
  private readonly sandboxOptions: Omit<SandboxCreateOptions, "image" | "signal">;
  private readonly logger: Logger;
  private readonly members: Member[] = [];
  private starting = 0;
  private readonly waiters: Waiter[] = [];
  private readonly held = new Map<string, Slot>();
  private quarantined = 0;
  private closed = false;
  private readonly sweeper: NodeJS.Timeout;
  /** Background work (starts, resets, kills) that close() waits for. */
  private readonly pending = new Set<Promise<unknown>>();

  constructor(options: SlotPoolOptions) {
    const int = (value: number | undefined, fallback: number, name: string, min: number): number => {
      const v = value ?? fallback;
      if (!Number.isInteger(v) || v < min) throw new SandboxError(`SlotPool: ${name} must be an integer >= ${min}, got ${String(value)}`);
      return v;
    };
    this.runtime = options.runtime;
    this.image = options.image;
    this.slotsPerSandbox = int(options.slotsPerSandbox, 4, "slotsPerSandbox", 1);
    this.minSandboxes = int(options.minSandboxes, 0, "minSandboxes", 0);
    this.maxSandboxes = int(options.maxSandboxes, 4, "maxSandboxes", 1);
    if (this.minSandboxes > this.maxSandboxes) throw new SandboxError(`SlotPool: minSandboxes (${this.minSandboxes}) is above maxSandboxes (${this.maxSandboxes})`);
    this.acquireTimeoutMs = int(options.acquireTimeoutMs, 30_000, "acquireTimeoutMs", 0);
    this.idleTimeoutMs = int(options.idleTimeoutMs, 10 * 60_000, "idleTimeoutMs", 1);
    this.maxLifetimeMs = int(options.maxLifetimeMs, 60 * 60_000, "maxLifetimeMs", 1);
    this.sandboxOptions = options.sandbox ?? {};
    this.logger = options.logger ?? silentLogger;
    const sweepMs = Math.max(20, Math.min(5000, Math.floor(Math.min(this.idleTimeoutMs, this.maxLifetimeMs) / 4)));
    this.sweeper = setInterval(() => this.sweep(), sweepMs);
    this.sweeper.unref();
    this.warm();
  }

  /**
   * A free slot (its workdir ready: empty, or a worktree of `repo` at its commit). Waits up to
   * acquireTimeoutMs for one; then SlotPoolExhaustedError.
   */
  async acquire(keyOrRequest: string | SlotRequest = {}): Promise<Slot> {
    this.assertOpen();
    const request = typeof keyOrRequest === "string" ? { key: keyOrRequest } : keyOrRequest;
    if (request.repo && (typeof request.repo.path !== "string" || !/^[0-9a-fA-F]{4,64}$/.test(request.repo.commit))) {
      throw new SandboxError(`SlotPool.acquire: repo.commit must be a hex commit id (4 to 64 digits), got ${JSON.stringify(request.repo.commit)}`);
    }
    const slot = await new Promise<Slot>((resolve, reject) => {
      // The timeout measures how long the pool stays full; time spent waiting for a sandbox
      // that is starting (capacity on its way) does not count.
      const expire = () => {
        if (this.starting > 0) {
          waiter.timer = setTimeout(expire, this.acquireTimeoutMs);
          return;
        }
        const at = this.waiters.indexOf(waiter);
        if (at >= 0) this.waiters.splice(at, 1);
        reject(new SlotPoolExhaustedError(`no free slot within ${this.acquireTimeoutMs} ms (${this.members.length} sandboxes of at most ${this.maxSandboxes}, ${this.slotsPerSandbox} slots each, all busy); retry later or raise maxSandboxes`, Math.max(1000, Math.min(30_000, this.acquireTimeoutMs))));
      };
      const waiter: Waiter = { request, resolve, reject, timer: setTimeout(expire, this.acquireTimeoutMs) };
      this.waiters.push(waiter);
      this.dispatch();
    });
    this.held.set(slot.id, slot);
    return slot;
  }

  /** The held slot with this id, or undefined. */
  get(id: string): Slot | undefined {
    return this.held.get(id);
  }

  /**
   * Gives the slot back. reset (default true): kill its processes, restore its workdir, confirm
   * both, and reuse it; an unconfirmed reset quarantines the sandbox. reset false: the slot is not
   * reused, and its sandbox is replaced once its other slots are free.
   */
  async release(slot: Slot, options: { reset?: boolean } = {}): Promise<void> {
    await this.finish(slot, new SlotGoneError(`slot ${slot.id} was released`, "released"), options.reset !== false);
  }

  /** Runs each item in its slot: items of one slot in order, different slots in parallel; results in item order. */
  async executeBatch(items: readonly BatchItem[]): Promise<ExecResult[]> {
    const results: ExecResult[] = new Array<ExecResult>(items.length);
    const bySlot = new Map<Slot, number[]>();
    items.forEach((item, i) => bySlot.set(item.slot, [...(bySlot.get(item.slot) ?? []), i]));
    await Promise.all(
      [...bySlot.entries()].map(async ([slot, indexes]) => {
        for (const i of indexes) {
          const item = items[i]!;
          results[i] = await slot.exec(item.command, item.options);
        }
      }),
    );
    return results;
  }

  stats(): SlotPoolStats {
    const live = this.members.filter((m) => !m.retiring);
    return {
      sandboxes: this.members.length,
      starting: this.starting,
      slotsTotal: live.length * this.slotsPerSandbox,
      slotsBusy: this.members.reduce((n, m) => n + m.slots.filter((s) => s !== null).length, 0),
      waiting: this.waiters.length,
      quarantined: this.quarantined,
    };
  }

  /** Refuses waiters, ends every slot and kills every sandbox; resolves when they are gone. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.sweeper);
    for (const waiter of this.waiters.splice(0)) {
      clearTimeout(waiter.timer);
      waiter.reject(new SlotGoneError("the slot pool was closed", "closed"));
    }
    for (const slot of this.held.values()) slot.gone = new SlotGoneError(`slot ${slot.id}: the slot pool was closed`, "closed");
    this.held.clear();
    while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
    const members = this.members.splice(0);
    await Promise.allSettled(members.map((m) => m.sandbox.kill()));
  }

  private assertOpen(): void {
    if (this.closed) throw new SlotGoneError("the slot pool is closed", "closed");
  }

  private track<T>(work: Promise<T>): Promise<T> {
    this.pending.add(work);
    void work.finally(() => this.pending.delete(work)).catch(() => undefined);
    return work;
  }

  /** Hands free slots to waiters (oldest first) and starts sandboxes while waiters outnumber free slots. */
  private dispatch(): void {
    if (this.closed) return;
    let i = 0;
    while (i < this.waiters.length) {
      const waiter = this.waiters[i]!;
      const place = this.freePlace(waiter.request);
      if (!place) {
        i++;
        continue;
      }
      this.waiters.splice(i, 1);
      clearTimeout(waiter.timer);
      const { member, index } = place;
      const slot = new Slot(member.sandbox, index, posix.join(member.sandbox.workdir, SLOTS_DIR, String(index)), waiter.request, Date.now() + Math.min(this.maxLifetimeMs, waiter.request.ttlMs ?? this.maxLifetimeMs));
      member.slots[index] = slot;
      if (waiter.request.key) member.keys.add(waiter.request.key);
      // The workdir is prepared before the slot is handed out; a failure goes to the waiter.
      void this.track(
        this.prepare(member, slot).then(
          () => waiter.resolve(slot),
          (error: unknown) => {
            member.slots[index] = null;
            waiter.reject(error instanceof Error ? error : new SandboxError(String(error)));
            this.quarantine(member, `preparing slot ${index} failed: ${error instanceof Error ? error.message : String(error)}`);
          },
        ),
      );
    }
    const free = this.members.filter((m) => !m.retiring).reduce((n, m) => n + m.slots.filter((s) => s === null).length, 0);
    const wanted = Math.ceil(Math.max(0, this.waiters.length - free - this.starting * this.slotsPerSandbox) / this.slotsPerSandbox);
    for (let k = 0; k < wanted && this.members.length + this.starting < this.maxSandboxes; k++) this.startSandbox();
  }

  /** A free slot, preferring a sandbox that already served the request's key. */
  private freePlace(request: SlotRequest): { member: Member; index: number } | null {
    let fallback: { member: Member; index: number } | null = null;
    for (const member of this.members) {
      if (member.retiring) continue;
      const index = member.slots.indexOf(null);
      if (index < 0) continue;
      if (request.key && member.keys.has(request.key)) return { member, index };
      fallback ??= { member, index };
    }
    return fallback;
  }

  private startSandbox(): void {
    this.starting++;
    void this.track(
      this.runtime
        .create({ ...this.sandboxOptions, image: this.image, labels: { ...this.sandboxOptions.labels, "proctor.slots": "true" } })
        .then(
          async (sandbox) => {
            this.starting--;
            if (this.closed) {
              await sandbox.kill();
              return;
            }
            this.members.push({
              sandbox,
              slots: new Array<Slot | null>(this.slotsPerSandbox).fill(null),
              prepared: new Array<string | null>(this.slotsPerSandbox).fill(null),
              keys: new Set(),
              repos: new Map(),
              retiring: false,
              worktreeChanges: Promise.resolve(),
            });
            this.dispatch();
          },
          (error: unknown) => {
            this.starting--;
            const message = error instanceof Error ? error.message : String(error);
            this.logger.warn("starting a slot sandbox failed", { error: message });
            // Waiters that no sandbox can serve now get the error instead of waiting it out.
            if (this.members.length + this.starting === 0) {
              for (const waiter of this.waiters.splice(0)) {
                clearTimeout(waiter.timer);
                waiter.reject(new SandboxError(`starting a sandbox for a slot failed: ${message}`, { cause: error }));
              }
            }
          },
        ),
    );
  }

  /** Keeps minSandboxes started. */
  private warm(): void {
    if (this.closed) return;
    const live = this.members.filter((m) => !m.retiring).length;
    for (let k = live + this.starting; k < this.minSandboxes && this.members.length + this.starting < this.maxSandboxes; k++) this.startSandbox();
  }

  /** Makes the slot's workdir: a worktree of the repo at its commit, else an empty dir. */
  private async prepare(member: Member, slot: Slot): Promise<void> {
    const state = stateOf(slot.request);
    // The last reset of this workdir confirmed exactly this state: nothing to do.
    if (member.prepared[slot.index] === state) return;
    member.prepared[slot.index] = null;
    await this.checkout(member, slot);
    member.prepared[slot.index] = state;
  }

  private async checkout(member: Member, slot: Slot): Promise<void> {
    const repo = slot.request.repo;
    if (!repo) {
      await this.admin(member.sandbox, RESET_SCRIPT, ["", slotDir(slot.index), ""], "making the slot's workdir");
      return;
    }
    const cache = await this.repoCache(member, repo.path);
    const script = `cache="$PWD/$1"; dir="$PWD/$2"; commit="$3"
if [ -e "$dir/.git" ]; then git -C "$dir" checkout -q --detach "$commit" 2>/dev/null || { git -C "$cache" worktree remove --force "$dir"; rm -rf "$dir"; }; fi
if [ ! -e "$dir/.git" ]; then rm -rf "$dir"; git -C "$cache" worktree prune; git -C "$cache" worktree add -q --detach "$dir" "$commit" || exit 1; fi
echo ok`;
    const change = member.worktreeChanges.then(() => this.admin(member.sandbox, script, [cache, slotDir(slot.index), repo.commit], `checking out ${repo.commit} for the slot`));
    member.worktreeChanges = change.catch(() => undefined); // the next change runs either way; this one's caller gets the error
    await change;
    await this.admin(member.sandbox, RESET_SCRIPT, ["", slotDir(slot.index), repo.commit], "resetting the slot's worktree");
  }

  /** The repo's cache in the sandbox (relative to its workdir), copied in once. */
  private repoCache(member: Member, hostPath: string): Promise<string> {
    let cache = member.repos.get(hostPath);
    if (!cache) {
      const rel = posix.join(SLOTS_DIR, "repos", String(member.repos.size));
      cache = member.sandbox.upload(hostPath, posix.join(member.sandbox.workdir, rel)).then(() => rel);
      member.repos.set(hostPath, cache);
      cache.catch(() => member.repos.delete(hostPath));
    }
    return cache;
  }

  /** Runs a housekeeping script that must print "ok"; throws with its output otherwise. */
  private async admin(sandbox: Sandbox, script: string, args: string[], what: string): Promise<void> {
    const result = await sandbox.exec([...sandbox.trustedTools, "sh", "-c", script, "proctor-slot", ...args], { user: sandbox.adminUser, cwd: sandbox.workdir, timeoutMs: HOUSEKEEPING_MS });
    if (result.exitCode !== 0 || !result.stdout.includes("ok")) {
      throw new SandboxError(`${what} in sandbox ${sandbox.id} failed (exit ${result.exitCode}): ${(result.stderr || result.stdout).trim().slice(-500)}`);
    }
  }

  /** Ends a slot: marks it gone, then resets and frees it (or retires / quarantines its sandbox). */
  private async finish(slot: Slot, reason: SlotGoneError, reset: boolean): Promise<void> {
    if (slot.gone) return;
    slot.gone = reason;
    this.held.delete(slot.id);
    const member = this.members.find((m) => m.slots[slot.index] === slot);
    if (!member) return; // its sandbox was quarantined already
    const work = (async () => {
      if (!reset) {
        member.retiring = true;
        return;
      }
      member.prepared[slot.index] = null;
      try {
        await this.admin(member.sandbox, RESET_SCRIPT, [slot.id, slotDir(slot.index), slot.request.repo?.commit ?? ""], "resetting the slot (killing its processes, restoring its workdir)");
        member.prepared[slot.index] = stateOf(slot.request);
      } catch (error) {
        this.quarantine(member, `reset of slot ${slot.index} could not be confirmed: ${error instanceof Error ? error.message : String(error)}`);
        return;
      }
    })();
    await this.track(work).finally(() => {
      if (member.slots[slot.index] === slot) member.slots[slot.index] = null;
      if (member.retiring && member.slots.every((s) => s === null)) this.remove(member);
      this.warm();
      this.dispatch();
    });
  }

  /** Takes the sandbox out of service: its holders' slots are gone, it is killed, and a replacement starts if wanted. */
  private quarantine(member: Member, why: string): void {
    if (!this.members.includes(member)) return;
    this.quarantined++;
    this.logger.warn("slot sandbox quarantined", { sandbox: member.sandbox.id, why });
    for (const slot of member.slots) {
      if (slot && !slot.gone) {
        slot.gone = new SlotGoneError(`slot ${slot.id} was lost: its sandbox was quarantined (${why})`, "lost");
        this.held.delete(slot.id);
      }
    }
    member.slots.fill(null);
    this.remove(member);
    this.warm();
    this.dispatch();
  }

  private remove(member: Member): void {
    const at = this.members.indexOf(member);
    if (at >= 0) this.members.splice(at, 1);
    void this.track(member.sandbox.kill().catch((error: unknown) => this.logger.warn("killing a slot sandbox failed", { error: error instanceof Error ? error.message : String(error) })));
  }

  /** Reclaims expired slots (idle, lifetime) and notices dead sandboxes. */
  private sweep(): void {
    const now = Date.now();
    for (const slot of [...this.held.values()]) {
      const idle = slot.busy === 0 && now - slot.lastUsedAt > this.idleTimeoutMs;
      if (idle || now > slot.expiresAt) {
        const why = idle ? `idle for more than ${this.idleTimeoutMs} ms` : "past its lifetime";
        void this.finish(slot, new SlotGoneError(`slot ${slot.id} expired (${why}) and was reclaimed; acquire a new one`, "expired"), true).catch(() => undefined);
      }
    }
  }

  /** Call when an operation on a slot's sandbox failed because the sandbox is gone: it is replaced and its holders told. */
  sandboxLost(slot: Slot, error: unknown): void {
    const member = this.members.find((m) => m.sandbox === slot.sandbox);
    if (member) this.quarantine(member, `the sandbox stopped: ${error instanceof Error ? error.message : String(error)}`);
  }
}
