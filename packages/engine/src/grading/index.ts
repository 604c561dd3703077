import { lstat } from "node:fs/promises";
import { join, posix } from "node:path";
import picomatch from "picomatch";
import { AgentError } from "@proctor/agents";
import { SandboxLostError, SandboxStartError, type FileAudit, type FileChange, type Sandbox, type SandboxProcess } from "@proctor/sandbox";
import type { GradingRecord, Integrity, TrialError } from "@proctor/schema";
import { gradeSwebench } from "../swebench/grade";
import { HOUSEKEEPING_MS, KEEP_OUTPUTS_BYTES, effectiveLimits, isolates, message, type SandboxAttempt } from "../trial/context";
import { judgeAudit } from "./audit-policy";
import { keepOutputs } from "./kept-outputs";
import { captureOutputs, findToolchains, placeOutputs, refuseShadowingModules, releaseOutputs, startGraderSandbox, type CapturedOutputs } from "./fresh";
import { namesTestsImport, shadowedInSandbox, shadowMessage, topLevelModule, type ModuleCandidate } from "./modules";
import { runVerifier, rewardChangedAfterRead, type RewardRead } from "./launcher";
import { planGrading, type GradingMode, type GradingPlan } from "./plan";
import { adminOptions, argumentChunks, asStopped, assertRunning, trusted } from "./sandbox-tools";
import { FORBIDDEN_TARGETS, forbiddenLink, forbiddenPath, resolveThrough, SHARED_FORBIDDEN_TARGETS } from "./repo-diff";
import { linksInto, sandboxLinks } from "./links";
import { portsTestsServe } from "./ports";

/** Places every agent writes to that no test looks at: not worth a note when left out. */
const SCRATCH = picomatch(["/tmp/**", "/var/tmp/**", "/root/.cache/**", "/root/.npm/**", "/var/cache/**", "/var/lib/apt/**", "/var/lib/dpkg/**", "/var/log/**", "/logs/**", "/agent/**", "/solution/**", "/tests/**", "/.proctor-channel", "/.proctor-channel/**", "/opt/proctor/**", "/.proctor", "/.proctor/**", "/usr/sbin/docker-init", "/run/**", "/proc/**", "/dev/**", "/etc/ld.so.cache"], { dot: true });

export { planGrading, pathsNamedByTests } from "./plan";
export type { GradingMode, GradingPlan } from "./plan";
export { GraderError, OutputsTooLargeError, OutputsUnusableError, OUTPUTS_TEMP_PREFIX } from "./fresh";
export { OUTPUTS_FILE, restoreOutputs } from "./kept-outputs";

/**
 * Grading one trial, after its agent: the one interface both modes implement. The trial calls
 * `outputs()` (phase "outputs": the agent's processes and what it produced), `prepare()` (phase
 * "grader": the sandbox the verifier runs in), `verify()` (phase "verifier"), then collects the
 * verifier's logs from `verifierSandbox` and calls `dispose()`.
 */
export interface Grading {
  readonly plan: GradingPlan;
  /** After the agent: isolation, surviving processes, the agent's outputs. */
  outputs(): Promise<void>;
  /** The verifier's sandbox, ready; false when the trial cannot be verified (the reason is in the state's errors). */
  prepare(): Promise<boolean>;
  /** Runs the tests and scores the trial into the attempt's state. */
  verify(): Promise<void>;
  /**
   * Shared mode with agent processes alive (or a runtime that cannot list them): the reward files
   * must be checked again after a while, since a process of the agent could rewrite them.
   */
  readonly rewardRead: RewardRead | null;
  readonly survivorsMayRewrite: boolean;
  /** Where the verifier ran (its /logs/verifier is the trial's verifier logs); null before prepare. */
  readonly verifierSandbox: Sandbox | null;
  /** Removes what grading started. Safe to call twice. */
  dispose(): Promise<void>;
}

/** Plans the trial's grading (`runGrading`: the run's --grading) and returns the grading to run. */
export async function startGrading(attempt: SandboxAttempt, image: string, runGrading: GradingMode | null): Promise<Grading> {
  const plan = await planGrading({ task: attempt.task, workdir: attempt.sandbox.workdir, runGrading });
  return plan.mode === "fresh" ? new FreshGrading(attempt, image, plan) : new SharedGrading(attempt, plan);
}

/** What both modes do first: the OOM count, then isolation or the list of survivors. */
abstract class BaseGrading implements Grading {
  rewardRead: RewardRead | null = null;
  survivorsMayRewrite = false;
  verifierSandbox: Sandbox | null = null;
  protected readonly integrity: Integrity;
  protected readonly record: GradingRecord;

  constructor(
    protected readonly attempt: SandboxAttempt,
    readonly plan: GradingPlan,
  ) {
    const strict = isolates(attempt.task, attempt.env);
    this.record = { mode: plan.mode, why: plan.why, outputs: [], joinedNetwork: false, audited: false };
    this.integrity = { isolation: strict ? "isolated" : "shared", tamperChecked: attempt.sandbox.capabilities.files, tampered: [], survivors: [], flagged: false, flags: [], note: null, grading: this.record };
    attempt.state.integrity = this.integrity;
    if (!attempt.sandbox.capabilities.files) {
      this.note(`the ${attempt.sandbox.runtime} runtime runs the agent as host processes: the verifier's tools are the host's, which the agent could change`);
    }
  }

  abstract outputs(): Promise<void>;
  abstract prepare(): Promise<boolean>;
  abstract verify(): Promise<void>;
  abstract dispose(): Promise<void>;

  protected note(text: string): void {
    this.integrity.note = this.integrity.note ? `${this.integrity.note}; ${text}` : text;
  }

  protected flag(text: string): void {
    this.integrity.flags = [...(this.integrity.flags ?? []), text];
  }

  protected tampered(paths: string[], why = ""): void {
    const { state } = this.attempt;
    this.integrity.tampered.push(...paths);
    state.errors.unshift({ kind: "agent", message: `tampered: ${paths.join(", ")}${why}` });
    state.reward = 0;
  }

  /** The OOM killer's count, recorded as the agent's error. */
  protected async checkMemory(): Promise<void> {
    const { sandbox, task, env, state } = this.attempt;
    const kills = sandbox.outOfMemoryKills ? await sandbox.outOfMemoryKills().catch(() => 0) : 0;
    if (kills === 0) return;
    const limit = effectiveLimits(task, env.limits).memoryMb;
    state.errors.push({ kind: "agent", message: `out of memory: the kernel killed ${kills} process(es) in the sandbox at its memory limit${limit !== undefined ? ` of ${limit} MB` : ""} (raise [environment] memory_mb if the task needs more)` });
  }

  /** The agent's processes still alive, or null when the runtime cannot list them. */
  protected async survivors(): Promise<SandboxProcess[] | null> {
    const { sandbox } = this.attempt;
    if (!sandbox.capabilities.processes || !sandbox.processes) {
      this.note(`the ${sandbox.runtime} runtime cannot list the agent's leftover processes`);
      return null;
    }
    const alive = await sandbox.processes();
    this.integrity.survivors = alive;
    return alive;
  }

  /**
   * An error of the verifier while agent processes were alive is the agent's: they can make the
   * tests hang or the reward vanish, and an error must not move a fail out of the scored trials.
   */
  protected blameSurvivors(): void {
    if (this.integrity.survivors.length === 0) return;
    const { state } = this.attempt;
    state.errors = state.errors.map((e): TrialError => (e.kind === "verifier" ? { kind: "agent", message: `${e.message} (with ${this.integrity.survivors.length} agent process(es) alive during verification)` } : e));
  }

  /**
   * Flags a pass when an agent process still listens on a port the tests serve on themselves: it
   * may have answered in their place (see portsTestsServe). Every survivor's ports are in the result.
   */
  protected async flagSquatters(): Promise<void> {
    const listening = this.integrity.survivors.filter((p) => p.ports.length > 0);
    if (listening.length === 0) return;
    const { verifier } = this.attempt.task;
    const served = await portsTestsServe(verifier.testsDir, verifier.mode === "checks" ? verifier.checks.map((c) => c.command).join("\n") : verifier.command);
    for (const p of listening) {
      for (const port of p.ports.filter((port) => served.has(port))) this.flag(`an agent process (pid ${p.pid}: ${p.command.slice(0, 80)}) listens on port ${port}, where the tests serve on their own: it may have answered in their place`);
    }
  }

  /** Runs the task's tests in `sandbox` (the grader's, or the agent's own; `testsMounted`: /tests is bound read-only there). */
  protected async runTests(sandbox: Sandbox, testsMounted = false): Promise<void> {
    const target: SandboxAttempt = { ...this.attempt, sandbox };
    if (this.attempt.task.format === "swebench") await gradeSwebench(target);
    else this.rewardRead = await runVerifier(target, { testsMounted });
  }
}

/** Fresh grading: a new sandbox from the task's image holding only the agent's outputs. */
class FreshGrading extends BaseGrading {
  private captured: CapturedOutputs | null = null;
  /** Modules the agent added at the top of a directory in the outputs (screened in the grader). */
  private modules: ModuleCandidate[] = [];
  /** What the agent changed against the image (null for repositories, or a runtime that cannot tell). */
  private changes: FileChange[] | null = null;
  /** The grader has the tests bound read-only at /tests (nothing to upload). */
  private testsMounted = false;
  private joinNetworkOf: string | null = null;
  private grader: Sandbox | null = null;

  constructor(
    attempt: SandboxAttempt,
    private readonly image: string,
    plan: GradingPlan,
  ) {
    super(attempt, plan);
    this.record.outputs = plan.repository ? [`repository diff of ${attempt.sandbox.workdir}`] : plan.outputs;
  }

  async outputs(): Promise<void> {
    const { sandbox, task, env } = this.attempt;
    // A sandbox that stopped by itself still holds the agent's files; one stopped from outside is lost.
    const running = sandbox.isRunning ? await sandbox.isRunning().catch(() => true) : true;
    if (!running && (await sandbox.stoppedExternally?.().catch(() => false))) throw new SandboxLostError("the sandbox was stopped from outside (a daemon restart or docker stop) during the trial");
    await this.checkMemory();
    const strict = isolates(task, env);
    if (running && !strict) {
      const alive = await this.survivors();
      // Services the agent left running stay reachable on localhost: the grader joins their network namespace.
      if (alive && alive.length > 0 && sandbox.capabilities.joinNetwork && env.runtime.capabilities.joinNetwork) this.joinNetworkOf = sandbox.id;
    }
    if (!this.joinNetworkOf && sandbox.halt) await sandbox.halt();
    else if (!this.joinNetworkOf && strict && sandbox.killAll) await sandbox.killAll();
    const changes = this.plan.repository || !sandbox.capabilities.changes || !sandbox.changes ? null : await sandbox.changes();
    this.changes = changes;
    if (changes) this.noteChangesLeftOut(changes);
    this.record.joinedNetwork = this.joinNetworkOf !== null;
    // No process of the agent can reach the grader's sandbox unless it shares their network.
    this.integrity.isolation = this.joinNetworkOf ? "shared" : "isolated";
    this.captured = await captureOutputs(this.attempt, this.plan);
    // Kept in the trial directory (bounded, compressed) so the trial can be graded again later.
    this.attempt.state.outputs = await keepOutputs(this.captured, this.plan.repository ? [sandbox.workdir] : this.plan.outputs, this.attempt.trialDir, env.keepOutputsBytes ?? KEEP_OUTPUTS_BYTES);
    if (this.captured.skipped.length > 0) this.record.skipped = this.captured.skipped.slice(0, 100).map((s) => `${s} (not a file, directory or link)`);
    if (changes) this.modules = await addedModules(changes, this.plan.outputs, this.captured);
  }

  /**
   * Tells the user when the agent changed files outside the outputs (a package it installed, a
   * config in /etc): the grader does not have them, which is right for tampering and wrong for a
   * task whose tests need them; such a task declares its outputs or asks for shared grading.
   */
  private noteChangesLeftOut(changes: readonly FileChange[]): void {
    const parents = new Set(changes.map((c) => posix.dirname(c.path)));
    const inside = (path: string) => this.plan.outputs.some((o) => path === o || path.startsWith(`${o.replace(/\/+$/, "")}/`));
    const left = changes.filter((c) => c.kind !== "deleted" && !parents.has(c.path) && !inside(c.path) && !SCRATCH(c.path)).map((c) => c.path).sort();
    if (left.length === 0) return;
    const shown = left.slice(0, 3).join(", ") + (left.length > 3 ? `, ... (${left.length} in all)` : "");
    this.note(`graded with only ${this.plan.outputs.join(", ")}: the agent also changed ${shown}, which the grader does not have; if the tests need them, declare them in [verifier] outputs or set [verifier] grading = "shared"`);
  }

  async prepare(): Promise<boolean> {
    if (!this.captured) throw new Error("prepare() before outputs()");
    const started = await startGraderSandbox(this.attempt, this.image, this.joinNetworkOf);
    this.grader = started.sandbox;
    this.testsMounted = started.testsMounted;
    this.record.testsReadOnly = started.testsMounted;
    this.verifierSandbox = this.grader;
    if (this.grader.networkFilesShared) this.flag("graded on the agent's network namespace with /etc/hosts and /etc/resolv.conf as the agent left them (the Docker daemon cannot see this process's temp dir, where the grader's own copies would be)");
    // Before the outputs come: the grader's interpreter and site dirs are still only the image's.
    const shadows = await refuseShadowingModules(this.attempt, this.grader, this.modules, this.plan.outputs, await namesTestsImport(this.attempt.task.verifier.testsDir, testCommands(this.attempt.task)));
    if (shadows.length > 0) {
      await releaseOutputs(this.captured);
      this.captured = null;
      this.tampered(shadows);
      return false;
    }
    const placed = await placeOutputs(this.attempt, this.grader, this.captured);
    await releaseOutputs(this.captured);
    this.captured = null;
    for (const flag of placed.flags) this.flag(flag);
    if (placed.skipped.length > 0) this.record.skipped = [...(this.record.skipped ?? []), ...placed.skipped].slice(0, 100);
    if (placed.tampered.length > 0) {
      this.tampered(placed.tampered, " (the agent's outputs change how the tests run)");
      return false;
    }
    // Followed as the grader's kernel will: through the image's own links too (/var/run -> /run).
    const into = await linksInto(this.grader, placed.links, FORBIDDEN_TARGETS, this.attempt.signal);
    if (into.length > 0) {
      this.tampered(into, " (links to what only the verifier brings)");
      return false;
    }
    if (placed.notes.length > 0) this.note(`repository configuration that runs programs and hooks are not carried to the grader (its git runs none of the agent's programs): ${placed.notes.join("; ")}`);
    const left = placed.kept.filter((root) => this.changes?.some((c) => c.path === root || c.path.startsWith(`${root}/`)));
    if (left.length > 0) this.note(`graded with the image's ${left.join(", ")}: the agent's changes there are not carried (the tests may run that toolchain); list them in [verifier] allow_changes if the task asks for them`);
    return true;
  }

  async verify(): Promise<void> {
    if (!this.grader) throw new Error("verify() before prepare()");
    await this.runTests(this.grader, this.testsMounted);
    this.blameSurvivors();
    if (this.joinNetworkOf) await this.flagSquatters();
  }

  async dispose(): Promise<void> {
    await releaseOutputs(this.captured);
    this.captured = null;
    const grader = this.grader;
    this.grader = null;
    if (grader) await grader.kill().catch((error: unknown) => this.attempt.env.logger.error("removing the grader's sandbox failed", { trialId: this.attempt.trialId, error: message(error) }));
  }
}

/** Shared grading: the verifier runs in the agent's own sandbox, its file accesses audited from the host. */
class SharedGrading extends BaseGrading {
  private audit: FileAudit | null = null;
  /** Toolchains of the image inside the outputs: what the agent changed there is judged as outside them. */
  private toolchains: string[] = [];
  private changesBefore: FileChange[] = [];
  private links: { path: string; target: string; resolved: string }[] = [];

  async outputs(): Promise<void> {
    const { sandbox, task, env, state } = this.attempt;
    await assertRunning(sandbox);
    const strict = isolates(task, env);
    if (strict) {
      // run.ts refuses strict isolation up front on a runtime without killAll.
      if (!sandbox.capabilities.killAll || !sandbox.killAll || !sandbox.processes) throw new Error(`the ${sandbox.runtime} runtime cannot isolate the verifier (no killAll)`);
      await this.checkMemory(); // before the restart resets the count
      await sandbox.killAll().catch((error: unknown) => {
        // The restart makes /logs in the agent's file system: a /logs it cannot use is the agent's doing.
        if (error instanceof SandboxStartError && /^Creating \/logs\/agent and \/logs\/verifier in the container failed/.test(error.message)) throw new AgentError(`the sandbox could not restart for the verifier: ${error.message}`);
        throw error;
      });
      const alive = await sandbox.processes();
      if (alive.length > 0) {
        state.errors.push({ kind: "verifier", message: `strict isolation failed: ${alive.length} process(es) alive after every process was ended: ${alive.map((p) => `${p.pid} ${p.command}`).join("; ").slice(0, 500)}` });
      }
      return;
    }
    await this.checkMemory();
    const alive = await this.survivors();
    this.survivorsMayRewrite = alive === null || alive.length > 0;
  }

  async prepare(): Promise<boolean> {
    const { sandbox } = this.attempt;
    this.verifierSandbox = sandbox;
    if (this.attempt.state.errors.some((e) => e.message.startsWith("strict isolation failed"))) return false;
    const caps = sandbox.capabilities;
    if (!caps.fileAudit || !sandbox.auditFiles || !caps.changes || !sandbox.changes) {
      this.flag(`graded in the agent's own sandbox without an audit of the files the verifier loaded (${caps.fileAuditUnavailable ?? `the ${sandbox.runtime} runtime cannot audit`})`);
      return true;
    }
    this.changesBefore = await sandbox.changes();
    this.links = await this.agentLinks(sandbox, this.changesBefore);
    const targets = new Map(this.links.map((l) => [l.path, l.target]));
    const forbidden: string[] = [];
    for (const l of this.links) {
      // As written, followed through the agent's other links (a link to "/" then "x/tests/..."),
      // and as the kernel follows it (through the image's links too).
      const why =
        forbiddenLink(l.path, l.target, SHARED_FORBIDDEN_TARGETS) ??
        forbiddenPath(await resolveThrough(l.path, async (p) => targets.get(p) ?? null), SHARED_FORBIDDEN_TARGETS) ??
        forbiddenPath(l.resolved, SHARED_FORBIDDEN_TARGETS);
      if (why) forbidden.push(`${l.path} (${why})`);
    }
    forbidden.push(...(await this.binaryNetworkFiles(sandbox)));
    if (forbidden.length > 0) {
      this.tampered(forbidden, " (links to what only the verifier brings, or to files the audit cannot watch)");
      return false;
    }
    const shadows = await this.shadowingModules(sandbox);
    if (shadows.length > 0) {
      this.tampered(shadows);
      return false;
    }
    // The image's toolchains inside the outputs (a venv in /app) are the harness's, not outputs.
    const added = new Set(this.changesBefore.filter((c) => c.kind === "added").map((c) => c.path));
    this.toolchains = (await findToolchains(sandbox, this.plan.outputs, this.attempt.signal)).filter((root) => !added.has(root));
    this.audit = await sandbox.auditFiles();
    return true;
  }

  /**
   * New modules in the outputs named like ones the tests' Python imports from elsewhere (the
   * audit allows what the harness loads from the outputs, so a shadow there is refused first).
   */
  private async shadowingModules(sandbox: Sandbox): Promise<string[]> {
    const present = new Set(this.changesBefore.filter((c) => c.kind !== "deleted").map((c) => c.path));
    const linked = new Set(this.links.map((l) => l.path));
    const candidates: ModuleCandidate[] = [];
    for (const change of this.changesBefore) {
      if (change.kind !== "added" || !withinOutputs(change.path, this.plan.outputs)) continue;
      const module = topLevelModule(change.path, linked.has(change.path));
      if (module && !present.has(posix.join(posix.dirname(module.path), "__init__.py"))) candidates.push(module);
    }
    if (candidates.length === 0) return [];
    const imports = await namesTestsImport(this.attempt.task.verifier.testsDir, testCommands(this.attempt.task));
    const deleted = this.changesBefore.filter((c) => c.kind === "deleted").map((c) => c.path);
    const shadows = await shadowedInSandbox(sandbox, candidates, imports, deleted);
    return candidates.filter((c) => shadows.has(c.name)).map(shadowMessage);
  }

  /**
   * /etc/hostname, /etc/hosts and /etc/resolv.conf are the runtime's bind mounts, outside the
   * audited file system: text files, unless the agent stored something to load there (a library
   * the loader's cache then names).
   */
  private async binaryNetworkFiles(sandbox: Sandbox): Promise<string[]> {
    const script = 'for f in /etc/hostname /etc/hosts /etc/resolv.conf; do [ -f "$f" ] || continue; if [ "$(tr -d \'\\000\' < "$f" | wc -c)" != "$(wc -c < "$f")" ]; then echo "$f"; fi; done; exit 0';
    const result = await sandbox.exec(trusted(sandbox, script), { ...adminOptions(sandbox), timeoutMs: HOUSEKEEPING_MS });
    if (result.exitCode !== 0) throw new Error(`checking the sandbox's network files failed (exit ${result.exitCode}): ${result.stderr.slice(-300)}`);
    return result.stdout.split("\n").filter(Boolean).map((f) => `${f} (binary content in a file the audit cannot watch)`);
  }

  /**
   * The links among what the agent added or changed: each with its target as written and what
   * it resolves to, read with the sandbox's trusted tools before the tests run.
   */
  private async agentLinks(sandbox: Sandbox, changes: readonly FileChange[]): Promise<{ path: string; target: string; resolved: string }[]> {
    const { linkAt, prefetch } = sandboxLinks(sandbox, this.attempt.signal);
    // Which of the agent's paths are links, in as few execs as the paths need.
    const paths = changes.filter((c) => c.kind !== "deleted").map((c) => c.path);
    await prefetch(paths);
    const links: { path: string; target: string }[] = [];
    for (const path of paths) {
      const target = await linkAt(path);
      if (target !== null) links.push({ path, target });
    }
    // As the kernel will follow them, through the image's links as well as the agent's (all at
    // once, so their questions share execs); a name that does not exist yet (/tests before the
    // tests come) is followed by name.
    return Promise.all(links.map(async ({ path, target }) => ({ path, target, resolved: (await resolveThrough(path, linkAt, prefetch)) ?? posix.resolve(posix.dirname(path), target) })));
  }

  async verify(): Promise<void> {
    const { sandbox, signal, task } = this.attempt;
    try {
      await asStopped(sandbox, signal, () => this.runTests(sandbox));
    } finally {
      if (this.audit) await this.judge(this.audit, task.verifier.allowChanges);
    }
    // The verifier's directories are in the agent's sandbox here: when they cannot be made
    // (the agent replaced /logs with a file, say), the agent made it so.
    for (const error of this.attempt.state.errors) {
      if (error.kind === "verifier" && error.message.startsWith("could not empty /logs/verifier")) {
        error.kind = "agent";
        error.message = `${error.message} (in the agent's sandbox, as the agent left it)`;
      }
    }
    this.blameSurvivors();
    await this.flagSquatters();
  }

  /** Applies the audit policy (audit-policy.ts) to what the verifier's processes loaded. */
  private async judge(audit: FileAudit, allowed: readonly string[]): Promise<void> {
    this.audit = null;
    const { sandbox } = this.attempt;
    const report = await audit.stop();
    const verdict = await judgeAudit({
      report,
      changes: this.changesBefore,
      links: this.links,
      outputs: this.plan.outputs,
      toolchains: this.toolchains,
      allowed,
      resolve: async (paths) => {
        // One line per path: the path, a tab, what it resolves to (nothing for a missing one).
        const result = await sandbox.exec(trusted(sandbox, 'for p in "$@"; do if [ -e "$p" ]; then printf "%s\\t%s\\n" "$p" "$(readlink -f "$p")"; fi; done; exit 0', paths), { ...adminOptions(sandbox), timeoutMs: HOUSEKEEPING_MS });
        return new Map(result.stdout.split("\n").filter(Boolean).map((line) => line.split("\t") as [string, string]));
      },
      sniff: (paths) => programsAmong(sandbox, paths),
      declaresPlugins: (paths) => declaringPlugins(sandbox, paths),
    });
    this.record.audited = verdict.untrusted === null;
    if (verdict.untrusted) this.flag(verdict.untrusted);
    if (verdict.tampered.length > 0) this.tampered(verdict.tampered);
  }

  async dispose(): Promise<void> {
    const audit = this.audit;
    this.audit = null;
    await audit?.stop().catch(() => undefined);
  }
}

/** Which of `paths` (entry_points.txt files in the sandbox) declare pytest plugins (a [pytest11] group). */
async function declaringPlugins(sandbox: Sandbox, paths: readonly string[]): Promise<Set<string>> {
  const found = new Set<string>();
  for (const chunk of argumentChunks(paths)) {
    const result = await sandbox.exec(trusted(sandbox, 'for p in "$@"; do if [ -f "$p" ] && grep -qiE "^[[:space:]]*\\[[[:space:]]*pytest11[[:space:]]*\\]" "$p"; then printf "%s\\n" "$p"; fi; done; exit 0', chunk), { ...adminOptions(sandbox), timeoutMs: HOUSEKEEPING_MS });
    if (result.exitCode !== 0) throw new Error(`reading the entry points the verifier loaded failed (exit ${result.exitCode}): ${result.stderr.slice(-300)}`);
    for (const line of result.stdout.split("\n").filter(Boolean)) found.add(line);
  }
  return found;
}

/** Which of `paths` (sandbox files) hold a program by their first bytes: an ELF file or a `#!` script. */
async function programsAmong(sandbox: Sandbox, paths: readonly string[]): Promise<Set<string>> {
  const found = new Set<string>();
  for (const chunk of argumentChunks(paths)) {
    // One line per regular file: its path, a tab, its first four bytes in hex.
    const script = 'for p in "$@"; do if [ -f "$p" ] && [ ! -L "$p" ]; then printf "%s\\t%s\\n" "$p" "$(head -c 4 -- "$p" | od -An -tx1 | tr -d " \\n")"; fi; done; exit 0';
    const result = await sandbox.exec(trusted(sandbox, script, chunk), { ...adminOptions(sandbox), timeoutMs: HOUSEKEEPING_MS });
    if (result.exitCode !== 0) throw new Error(`reading the heads of the files the verifier read failed (exit ${result.exitCode}): ${result.stderr.slice(-300)}`);
    for (const line of result.stdout.split("\n").filter(Boolean)) {
      const [path = "", head = ""] = line.split("\t");
      if (head.startsWith("7f454c46") || head.startsWith("2321")) found.add(path);
    }
  }
  return found;
}

/** A reward file that changed after the verifier's exec read it was rewritten by someone else. */
export async function checkRewardUnchanged(attempt: SandboxAttempt, read: RewardRead): Promise<void> {
  const { state } = attempt;
  const changed = await rewardChangedAfterRead(attempt, read);
  if (changed.length === 0) return;
  state.errors.unshift({ kind: "agent", message: `tampered: ${changed.join(", ")} changed after the verifier's reward was read` });
  state.reward = 0;
  if (state.integrity) state.integrity.tampered.push(...changed);
}

/** The commands a task's tests run besides their files (checks), scanned for the modules they import. */
function testCommands(task: SandboxAttempt["task"]): string[] {
  const verifier = task.verifier;
  return verifier.mode === "checks" ? verifier.checks.map((c) => c.command) : [verifier.command];
}

/** `path` relative to the output it is in, with that output; null outside every output. */
function withinOutputs(path: string, outputs: readonly string[]): { output: string; rel: string } | null {
  for (const output of outputs) {
    const root = output.replace(/\/+$/, "") || "/";
    if (path.startsWith(`${root === "/" ? "" : root}/`)) return { output, rel: path.slice(root === "/" ? 1 : root.length + 1) };
  }
  return null;
}

/**
 * The modules among what the agent added to the outputs that sit at the top of a directory that
 * is not a package (where a test command's Python may look first), read from the staged copy.
 */
async function addedModules(changes: readonly FileChange[], outputs: readonly string[], captured: CapturedOutputs): Promise<ModuleCandidate[]> {
  const found: ModuleCandidate[] = [];
  for (const change of changes) {
    if (change.kind !== "added") continue;
    const inside = withinOutputs(change.path, outputs);
    const staged = inside ? captured.paths.find((p) => p.path === inside.output)?.staged : null;
    if (!inside || !staged) continue;
    const host = join(staged, inside.rel);
    const info = await lstat(host).catch(() => null);
    if (!info) continue;
    const module = topLevelModule(change.path, info.isSymbolicLink());
    if (!module) continue;
    const dir = posix.dirname(module.path);
    const parentInit = join(staged, posix.relative(inside.output, dir), "__init__.py");
    if (dir !== inside.output.replace(/\/+$/, "") && (await lstat(parentInit).catch(() => null))) continue;
    found.push(module);
  }
  return found;
}
