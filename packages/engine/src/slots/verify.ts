import type { Slot } from "@proctor/sandbox";
import type { TaskSpec } from "@proctor/schema";
import { parseReward } from "@proctor/reward";
import type { SlotVerifyResult } from "./service";

/**
 * Runs a reward-file task's tests in the slot (its workdir as PROCTOR_WORKDIR) as root through the
 * trusted path, from tests uploaded fresh into an emptied directory, and reads the reward.
 */
export async function verifyRewardTask(slot: Slot, task: TaskSpec, timeoutMs: number, tailBytes: number): Promise<SlotVerifyResult> {
  const sandbox = slot.sandbox;
  const verifier = task.verifier;
  if (verifier.mode !== "reward-file" || verifier.testsDir === null) throw new Error(`task ${task.id} has no reward-file tests`);
  const base = `/tmp/proctor-verify/${slot.id}`;
  const paths = { tests: `${base}/tests`, logs: `${base}/logs`, verifier: `${base}/logs/verifier` };
  const admin = sandbox.adminUser === undefined ? {} : { user: sandbox.adminUser };
  await sandbox.exec([...sandbox.trustedTools, "sh", "-c", 'rm -rf "$1" && mkdir -p "$2"', "proctor-verify", base, paths.verifier], { ...admin, timeoutMs: 60_000 });
  await sandbox.upload(verifier.testsDir, paths.tests);
  const result = await sandbox.exec(
    { shell: verifier.command },
    {
      ...admin,
      cwd: slot.workdir,
      timeoutMs,
      env: {
        ...verifier.env,
        PROCTOR_WORKDIR: slot.workdir,
        PROCTOR_TESTS_DIR: paths.tests,
        PROCTOR_LOGS_DIR: paths.logs,
        PROCTOR_VERIFIER_LOGS_DIR: paths.verifier,
      },
      maxOutputBytes: 64 * 1024,
    },
  );
  const json = await sandbox.readFile(`${paths.verifier}/reward.json`, { maxBytes: 1024 * 1024 });
  const txt = json ? null : await sandbox.readFile(`${paths.verifier}/reward.txt`, { maxBytes: 1024 });
  let reward: number | null = null;
  let error: string | null = null;
  try {
    reward = parseReward({ json: json?.toString("utf8") ?? null, txt: txt?.toString("utf8") ?? null }).reward;
  } catch (e) {
    error = e instanceof Error ? e.message : String(e);
  }
  return {
    reward,
    resolved: reward !== null && reward >= 1,
    tests: null,
    exitCode: result.exitCode,
    timedOut: result.timedOut,
    output: (result.stdout + result.stderr).slice(-tailBytes),
    error,
  };
}
