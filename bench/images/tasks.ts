/**
 * The bench's tasks: native Proctor tasks, each with its own environment/Dockerfile on
 * proctor/base:bookworm that generates a CSV table of `dataMb` MB (from a seed: the bench run's
 * nonce and the task's number) and installs a small script. The nonce is the first instruction
 * after FROM, so a new nonce makes every image new to every daemon, every build cache and the
 * registry: a cold run is cold. The oracle solves each task; the verifier recomputes the answer
 * from the image's table.
 */
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";

const GEN_PY = `"""Writes a CSV table of about MB megabytes whose rows follow from SEED (sha256 of SEED:row)."""
import hashlib
import sys

seed, out, megabytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
limit = megabytes * 1024 * 1024
with open(out, "w") as f:
    f.write("id,key,value\\n")
    row, size = 0, 0
    while size < limit:
        digest = hashlib.sha256(f"{seed}:{row}".encode()).hexdigest()
        line = f"{row},{digest[:24]},{int(digest[24:32], 16) % 1000}\\n"
        f.write(line)
        size += len(line)
        row += 1
print(f"{out}: {row} rows, {size} bytes")
`;

const COUNT_SH = `#!/bin/sh
# count-at-least T: rows of /opt/bench/table.csv whose value is at least T.
awk -F, -v t="$1" 'NR > 1 && $3 >= t { n++ } END { print n + 0 }' /opt/bench/table.csv
`;

/** Writes `count` task directories under `dir` (ids img-00, img-01, ...); returns their paths. */
export async function writeTasks(dir: string, options: { count: number; nonce: string; dataMb: number }): Promise<string[]> {
  const tasks: string[] = [];
  for (let i = 0; i < options.count; i++) {
    const id = `img-${String(i).padStart(2, "0")}`;
    const task = join(dir, id);
    const threshold = (i * 37) % 1000;
    await mkdir(join(task, "environment"), { recursive: true });
    await mkdir(join(task, "tests"), { recursive: true });
    await mkdir(join(task, "solution"), { recursive: true });
    await writeFile(
      join(task, "environment", "Dockerfile"),
      [
        "FROM proctor/base:bookworm",
        `ENV BENCH_IMAGE_SEED=${options.nonce}-${id}`,
        "COPY gen.py /opt/bench/gen.py",
        `RUN python3 /opt/bench/gen.py "$BENCH_IMAGE_SEED" /opt/bench/table.csv ${options.dataMb} && python3 -m compileall -q /opt/bench`,
        "COPY count-at-least.sh /usr/local/bin/count-at-least",
        "RUN chmod 755 /usr/local/bin/count-at-least && count-at-least 500 > /opt/bench/half.txt",
        "WORKDIR /app",
        "",
      ].join("\n"),
    );
    await writeFile(join(task, "environment", "gen.py"), GEN_PY);
    await writeFile(join(task, "environment", "count-at-least.sh"), COUNT_SH);
    await writeFile(join(task, "task.toml"), `version = "1.0"\n\n[metadata]\ncategory = "bench-images"\n\n[environment]\nbuild_timeout_sec = 900\n\n[agent]\ntimeout_sec = 120\n\n[verifier]\ntimeout_sec = 120\n`);
    await writeFile(join(task, "instruction.md"), `/opt/bench/table.csv is a CSV table (id,key,value). Write to /app/answer.txt the number of its rows whose value is at least ${threshold}, as one line.\n`);
    await writeFile(join(task, "solution", "solve.sh"), `#!/usr/bin/env bash\nset -euo pipefail\ncount-at-least ${threshold} > /app/answer.txt\n`);
    await writeFile(
      join(task, "tests", "test.sh"),
      [
        "#!/usr/bin/env bash",
        'REWARD_DIR="${PROCTOR_LOGS_DIR:-/logs}/verifier"',
        'mkdir -p "$REWARD_DIR"',
        'echo 0 > "$REWARD_DIR/reward.txt"',
        `want=$(awk -F, 'NR > 1 && $3 >= ${threshold} { n++ } END { print n + 0 }' /opt/bench/table.csv)`,
        'got=$(cat /app/answer.txt 2>/dev/null)',
        '[ "$got" = "$want" ] || { echo "FAIL: answer.txt has \'$got\', want $want"; exit 0; }',
        'echo PASS',
        'echo 1 > "$REWARD_DIR/reward.txt"',
        "",
      ].join("\n"),
    );
    await chmod(join(task, "tests", "test.sh"), 0o755);
    await chmod(join(task, "solution", "solve.sh"), 0o755);
    tasks.push(task);
  }
  return tasks;
}
