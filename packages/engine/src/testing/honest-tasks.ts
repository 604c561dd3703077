/**
 * A regression set of honest tasks shaped like real Terminal-Bench 2 / SWE-bench tasks: each
 * solution (run by the `oracle` agent) does the work the honest way, and each task must pass
 * clean (reward 1, nothing tampered, not flagged) however it is graded. They guard the grading
 * against refusing honest work (honest-tasks.docker.test.ts runs them). Used by the engine's
 * tests only (not exported from the package).
 *
 * Every test.sh is TB2-shaped: pytest on tests/test_outputs.py, then 1 or 0 into
 * /logs/verifier/reward.txt. Tasks whose tests name nothing outside /app are graded fresh by
 * default; the others (marked "shared") are graded in the agent's own sandbox, audited.
 */
import { execFileSync } from "node:child_process";
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { writeTasks, type FixtureTask } from "./fixtures";
import { CALC_OPS, type SweCalcFixture, type SweCalcRow } from "./swe-calc";

/** A native task with the files writeTasks does not write (tests/test_outputs.py, environment/Dockerfile, ...). */
export interface HonestTask extends FixtureTask {
  /** Extra files, by path relative to the task dir. */
  files?: Record<string, string>;
  /** Its tests talk to a service the solution left running (killed by design with --isolate-verifier). */
  service?: true;
  /** Its solution installs Debian packages (needs the network, one apt-get update: slow). */
  apt?: true;
  /** Its tests name paths outside /app: graded in the agent's own sandbox (audited) by default. */
  shared?: true;
}

/**
 * The image of the tasks that build one (one build: the same context for all of them, hashed by
 * content). Root's ~/.bashrc sets up an interactive shell (image-bashrc), /app ships a module
 * with its bytecode (same-size-module-edit) and a git project (git-commit-branch).
 */
const HONEST_DOCKERFILE = `FROM proctor/base:bookworm
RUN mkdir -p /opt/acme/bin \\
 && printf '#!/bin/sh\\necho "acme-cli 2.1"\\n' > /opt/acme/bin/acme-version \\
 && chmod 755 /opt/acme/bin/acme-version \\
 && echo 'export GREETING=hello' >> /root/.bashrc \\
 && echo 'export PATH="/opt/acme/bin:$PATH"' >> /root/.bashrc \\
 && echo "alias greet='/app/greet.sh'" >> /root/.bashrc
RUN printf 'def add(a, b):\\n    return a - b\\n' > /app/calc.py && python3 -m compileall -q /app
RUN git init -q -b main /app/project \\
 && echo '# project' > /app/project/README.md \\
 && git -C /app/project add README.md \\
 && git -C /app/project -c user.name=Image -c user.email=image@example.com commit -q -m 'Initial commit'
`;

const TOML = "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 90\n";
const APT_TOML = "[agent]\ntimeout_sec = 300\n[verifier]\ntimeout_sec = 120\n[environment]\nallow_internet = true\n";
const APT = "export DEBIAN_FRONTEND=noninteractive\napt-get update -qq && apt-get install -y -qq --no-install-recommends";

/** TB2's test.sh: pytest from `cwd` on `target`, reward 1 iff it passed. */
function pytestSh(cwd: string, target = "/tests/test_outputs.py"): string {
  return [`cd ${cwd}`, `python3 -m pytest -rA ${target}`, "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi"].join("\n");
}

/** A here-document writing `content` to `path`. */
const put = (path: string, content: string) => `mkdir -p "$(dirname ${path})"\ncat > ${path} <<'PROCTOR_EOF'\n${content.replace(/\n$/, "")}\nPROCTOR_EOF`;

/** Waits (up to 10 s) until something listens on 127.0.0.1:`port`. */
const waitForPort = (port: number) =>
  `for i in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1', ${port}), 1)" 2>/dev/null && break; sleep 0.1; done`;

const SAMPLE_TEXT = "the quick brown fox jumps over the lazy dog\nthe dog sleeps and the fox runs\n";

/** The venv solution (venv-local-package, venv-runs-tests): a package installed by hand as pip lays it out. */
const VENV_SOLVE = [
  "set -e",
  "python3 -m venv --without-pip --system-site-packages /app/venv",
  "SP=/app/venv/lib/python3.11/site-packages",
  put(
    "$SP/mypkg/__init__.py",
    '"""A tiny package."""\nimport sys\n\n__version__ = "1.0"\n\n\ndef greet(name):\n    return "hello, " + name\n\n\ndef main():\n    print(greet(sys.argv[1] if len(sys.argv) > 1 else "world"))\n    return 0\n',
  ),
  put("$SP/mypkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: mypkg\nVersion: 1.0\nSummary: A tiny package\n"),
  put("$SP/mypkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
  put("$SP/mypkg-1.0.dist-info/INSTALLER", "pip\n"),
  put("$SP/mypkg-1.0.dist-info/top_level.txt", "mypkg\n"),
  put("$SP/mypkg-1.0.dist-info/entry_points.txt", "[console_scripts]\nmypkg-hello = mypkg:main\n"),
  put(
    "$SP/mypkg-1.0.dist-info/RECORD",
    "../../../bin/mypkg-hello,,\nmypkg/__init__.py,,\nmypkg-1.0.dist-info/METADATA,,\nmypkg-1.0.dist-info/WHEEL,,\nmypkg-1.0.dist-info/INSTALLER,,\nmypkg-1.0.dist-info/top_level.txt,,\nmypkg-1.0.dist-info/entry_points.txt,,\nmypkg-1.0.dist-info/RECORD,,\n",
  ),
  put("/app/venv/bin/mypkg-hello", "#!/app/venv/bin/python\nimport sys\n\nfrom mypkg import main\n\nif __name__ == \"__main__\":\n    sys.exit(main())\n"),
  "chmod +x /app/venv/bin/mypkg-hello",
].join("\n");

export const HONEST_TASKS: Record<string, HonestTask> = {
  // TB2 "write a CLI in /app" shape: main.py imports a sibling module; the tests run it in a
  // subprocess by path, from the workdir (as a script and with -m), and import the helper with
  // cwd=/app (fresh).
  "py-sibling-import": {
    toml: TOML,
    instruction: "Write a command-line program /app/main.py that prints the sum of its integer arguments. Put the arithmetic in a separate module /app/helper.py (a function `total(numbers)`) that main.py imports.\n",
    solve: [put("/app/helper.py", "def total(numbers):\n    return sum(numbers)\n"), put("/app/main.py", "import sys\n\nfrom helper import total\n\nprint(total(int(a) for a in sys.argv[1:]))\n")].join("\n"),
    test: pytestSh("/app"),
    files: {
      "tests/test_outputs.py": `import subprocess


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, **kw)


def test_run_by_path():
    r = run(["python3", "/app/main.py", "2", "3", "4"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "9"


def test_run_from_workdir():
    r = run("cd /app && python3 main.py 10 -3", shell=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "7"


def test_run_as_module_from_workdir():
    r = run("cd /app && python3 -m main 5 6", shell=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "11"


def test_helper_importable_from_workdir():
    r = run(["python3", "-c", "import helper; print(helper.total([1, 2]))"], cwd="/app")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "3"
`,
    },
  },

  // The same, with the program named /app/test.py (the standard library has a `test` package):
  // the tests run it by path and from the workdir (fresh).
  "stdlib-named-script": {
    toml: TOML,
    instruction: "Write /app/test.py, a program that prints the number of words in the text file named by its argument. Put the counting in /app/wordcount.py (a function `count_words(text)`) and import it from test.py.\n",
    solve: [
      put("/app/wordcount.py", "def count_words(text):\n    return len(text.split())\n"),
      put("/app/test.py", "import sys\n\nfrom wordcount import count_words\n\nwith open(sys.argv[1]) as f:\n    print(count_words(f.read()))\n"),
    ].join("\n"),
    test: pytestSh("/app"),
    files: {
      "tests/sample.txt": SAMPLE_TEXT,
      "tests/test_outputs.py": `import subprocess


def test_run_by_path():
    r = subprocess.run(["python3", "/app/test.py", "/tests/sample.txt"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "16"


def test_run_from_workdir():
    r = subprocess.run("cd /app && python3 test.py /tests/sample.txt", shell=True, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "16"
`,
    },
  },

  // TB2 tasks on a team's dev image: the image's root ~/.bashrc exports GREETING, puts
  // /opt/acme/bin on PATH and aliases greet=/app/greet.sh; the tests run the agent's script in an
  // interactive shell (bash -ic reads ~/.bashrc) and rely on that set-up (fresh, built image).
  "image-bashrc": {
    toml: TOML,
    instruction:
      "This image's shell set-up (root's ~/.bashrc) exports GREETING, puts the acme tools on PATH and aliases `greet` to /app/greet.sh. Write /app/greet.sh: it prints `$GREETING, <name>!` for the name given as its argument, then the output of the `acme-version` tool.\n",
    solve: [put("/app/greet.sh", '#!/bin/bash\n[ -n "$GREETING" ] || { echo "GREETING is not set" >&2; exit 1; }\necho "$GREETING, $1!"\nacme-version\n'), "chmod +x /app/greet.sh"].join("\n"),
    test: pytestSh("/app"),
    files: {
      "environment/Dockerfile": HONEST_DOCKERFILE,
      "tests/test_outputs.py": `import subprocess


def interactive(command):
    return subprocess.run(["bash", "-ic", command], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def test_alias_from_bashrc():
    r = interactive("greet world")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["hello, world!", "acme-cli 2.1"]


def test_script_in_interactive_shell():
    r = interactive("/app/greet.sh proctor")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["hello, proctor!", "acme-cli 2.1"]
`,
    },
  },

  // TB2's nginx tasks: the solution apt-installs nginx, serves a page and leaves it running; the
  // tests read the pid file as /var/run/nginx.pid (/var/run -> /run) and by a glob, check the
  // master is alive through /proc, run `nginx -t`, fetch the page and find the request in the
  // access log (shared: the tests name /var/run, /var/log).
  "nginx-service": {
    toml: APT_TOML,
    shared: true,
    service: true,
    apt: true,
    instruction: "Install nginx and keep it running: it serves a page containing 'Proctor nginx' at http://127.0.0.1/ and answers /health with 'ok'. Log requests to the default access log.\n",
    solve: [
      `${APT} nginx >/dev/null`,
      put("/var/www/html/index.html", "<h1>Proctor nginx</h1>\n"),
      put("/etc/nginx/sites-available/default", 'server {\n    listen 80 default_server;\n    root /var/www/html;\n    index index.html;\n    location = /health { return 200 "ok\\n"; }\n}\n'),
      "nginx -t && nginx",
      waitForPort(80),
    ].join("\n"),
    test: pytestSh("/app"),
    files: {
      "tests/test_outputs.py": `import glob
import os
import subprocess
import time
import urllib.request

PID_FILE = "/var/run/nginx.pid"


def master_pid():
    with open(PID_FILE) as f:
        return int(f.read().strip())


def test_pid_file_names_the_live_master():
    pid = master_pid()
    os.kill(pid, 0)
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        assert b"nginx: master process" in f.read()


def test_pid_file_found_by_glob():
    assert glob.glob("/var/run/nginx*.pid") == [PID_FILE]


def test_config_is_valid():
    r = subprocess.run(["nginx", "-t"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_serves_the_page():
    assert b"Proctor nginx" in urllib.request.urlopen("http://127.0.0.1/", timeout=10).read()
    assert urllib.request.urlopen("http://127.0.0.1/health", timeout=10).read() == b"ok\\n"


def test_request_is_logged():
    probe = "probe-%d" % time.time_ns()
    urllib.request.urlopen("http://127.0.0.1/?" + probe, timeout=10).read()
    for _ in range(50):
        with open("/var/log/nginx/access.log") as f:
            if probe in f.read():
                return
        time.sleep(0.1)
    raise AssertionError("the request is not in /var/log/nginx/access.log")
`,
    },
  },

  // TB2's "set up users and a mail service" shape: useradd -m (passwd, group, shadow, gshadow,
  // subuid, subgid and their - backups change), a Python daemon with its pid in /run, a sqlite
  // database (WAL) under /var/lib/maild and mbox spools in /var/mail. The tests check the
  // accounts with the image's tools (id, getent, passwd -S), create a user of their own with
  // useradd (which reads /etc/subuid), talk to the daemon and read its database and spools
  // (shared: the tests name /var/lib, /var/mail, /var/run, /home).
  "accounts-mail-daemon": {
    toml: TOML,
    shared: true,
    service: true,
    instruction:
      "Create users alice and bob (home directories, bash as their shell, members of the mail group). Run a mail daemon that keeps its pid in /var/run/maild.pid, stores every message in the sqlite database /var/lib/maild/mail.db (table messages: recipient, subject, body, delivered_at), appends each message in mbox format to /var/mail/<user> (owned by the user, group mail), delivers a 'Welcome' message to alice and bob on start, and accepts `user<TAB>subject<TAB>body` lines on 127.0.0.1:2525, answering `250 OK` or `550 no such user`.\n",
    solve: [
      "set -e",
      "for u in alice bob; do useradd -m -s /bin/bash \"$u\"; usermod -aG mail \"$u\"; done",
      put(
        "/opt/maild/maild.py",
        `import grp
import os
import pwd
import socket
import sqlite3
import time

DB = "/var/lib/maild/mail.db"
PID = "/run/maild.pid"
SPOOL = "/var/mail"


def deliver(db, user, subject, body):
    pw = pwd.getpwnam(user)
    db.execute("INSERT INTO messages (recipient, subject, body, delivered_at) VALUES (?, ?, ?, ?)", (user, subject, body, time.time()))
    db.commit()
    path = os.path.join(SPOOL, user)
    with open(path, "a") as f:
        f.write("From maild@localhost %s\\nFrom: maild@localhost\\nTo: %s\\nSubject: %s\\n\\n%s\\n\\n" % (time.asctime(), user, subject, body))
    os.chown(path, pw.pw_uid, grp.getgrnam("mail").gr_gid)
    os.chmod(path, 0o660)


def main():
    os.makedirs(os.path.dirname(DB), exist_ok=True)
    db = sqlite3.connect(DB)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, recipient TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL, delivered_at REAL NOT NULL)")
    db.commit()
    for user in ("alice", "bob"):
        deliver(db, user, "Welcome", "Hello %s, your mailbox is ready." % user)
    server = socket.create_server(("127.0.0.1", 2525))
    with open(PID, "w") as f:
        f.write("%d\\n" % os.getpid())
    while True:
        conn, _ = server.accept()
        with conn, conn.makefile("rw") as io:
            parts = io.readline().rstrip("\\n").split("\\t")
            if len(parts) != 3:
                io.write("500 bad request\\n")
                continue
            try:
                deliver(db, *parts)
                io.write("250 OK\\n")
            except KeyError:
                io.write("550 no such user\\n")


main()
`,
      ),
      "mkdir -p /var/log/maild",
      "setsid python3 /opt/maild/maild.py >/var/log/maild/maild.log 2>&1 </dev/null &",
      "for i in $(seq 100); do [ -s /run/maild.pid ] && break; sleep 0.1; done",
      waitForPort(2525),
    ].join("\n"),
    test: pytestSh("/app"),
    files: {
      "tests/test_outputs.py": `import os
import pwd
import socket
import sqlite3
import subprocess

DB = "/var/lib/maild/mail.db"


def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def send(user, subject, body):
    with socket.create_connection(("127.0.0.1", 2525), timeout=10) as s:
        s.sendall(("%s\\t%s\\t%s\\n" % (user, subject, body)).encode())
        return s.makefile().readline().strip()


def rows(query, *args):
    db = sqlite3.connect(DB)
    try:
        return db.execute(query, args).fetchall()
    finally:
        db.close()


def test_users():
    for user in ("alice", "bob"):
        r = sh("id", user)
        assert r.returncode == 0, r.stderr
        assert "(mail)" in r.stdout
        entry = sh("getent", "passwd", user).stdout.strip().split(":")
        assert entry[5] == "/home/" + user and entry[6] == "/bin/bash"
        assert os.path.isfile(os.path.join("/home", user, ".bashrc"))
        assert sh("passwd", "-S", user).stdout.split()[0] == user
    assert {"alice", "bob"} <= set(sh("getent", "group", "mail").stdout.strip().split(":")[3].split(","))


def test_daemon_running():
    with open("/var/run/maild.pid") as f:
        pid = int(f.read().strip())
    os.kill(pid, 0)
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        assert b"maild.py" in f.read()


def test_welcome_mail():
    for user in ("alice", "bob"):
        with open(os.path.join("/var/mail", user)) as f:
            assert "Subject: Welcome" in f.read()
        assert os.stat(os.path.join("/var/mail", user)).st_uid == pwd.getpwnam(user).pw_uid
    assert sorted(r[0] for r in rows("SELECT recipient FROM messages WHERE subject = 'Welcome'")) == ["alice", "bob"]


def test_unknown_user():
    assert send("nobody-here", "Hi", "x") == "550 no such user"


def test_delivers_to_a_new_user():
    assert sh("useradd", "-m", "carol").returncode == 0
    try:
        assert send("carol", "Ping", "are you there?") == "250 OK"
        with open("/var/mail/carol") as f:
            assert "Subject: Ping" in f.read()
        assert rows("SELECT body FROM messages WHERE recipient = ?", "carol") == [("are you there?",)]
    finally:
        sh("userdel", "-r", "carol")
`,
    },
  },

  // TB2's "install a tool with apt and configure it" shape: jq from Debian, a filter the solution
  // keeps under /etc/jq/filters.d that the tests find with a glob and run with jq (shared).
  "apt-jq-config": {
    toml: APT_TOML,
    shared: true,
    apt: true,
    instruction:
      "Install jq. Write a jq filter in /etc/jq/filters.d/10-in-stock.jq that, given an inventory like {\"items\": [{\"name\": ..., \"qty\": ...}]}, prints the names of the items in stock (qty > 0), sorted and joined by commas. Also write that list for /app/inventory.json into /app/in-stock.txt.\n",
    solve: [
      `${APT} jq >/dev/null`,
      put("/etc/jq/filters.d/10-in-stock.jq", '[.items[] | select(.qty > 0) | .name] | sort | join(",")\n'),
      put("/app/inventory.json", '{"items": [{"name": "pear", "qty": 3}, {"name": "plum", "qty": 0}, {"name": "apple", "qty": 7}]}\n'),
      "jq -r -f /etc/jq/filters.d/10-in-stock.jq /app/inventory.json > /app/in-stock.txt",
    ].join("\n"),
    test: pytestSh("/app"),
    files: {
      "tests/inventory.json": '{"items": [{"name": "fig", "qty": 1}, {"name": "date", "qty": 0}, {"name": "banana", "qty": 12}]}\n',
      "tests/test_outputs.py": `import glob
import subprocess


def test_jq_installed():
    r = subprocess.run(["jq", "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.startswith("jq-"), r.stderr


def test_filter_in_config_dir():
    filters = sorted(glob.glob("/etc/jq/filters.d/*.jq"))
    assert filters
    r = subprocess.run(["jq", "-r", "-f", filters[0], "/tests/inventory.json"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "banana,fig"


def test_output_file():
    with open("/app/in-stock.txt") as f:
        assert f.read().strip() == "apple,pear"
`,
    },
  },

  // A virtual environment in the workdir (TB2 tasks that ask for /app/venv): made with
  // `python3 -m venv --without-pip --system-site-packages` (the image has no ensurepip), a
  // package installed into it as pip lays it out (mypkg/ + mypkg-1.0.dist-info with METADATA,
  // RECORD, entry_points.txt, and the console script in venv/bin); the tests run the venv's
  // python and the script (fresh).
  "venv-local-package": {
    toml: TOML,
    instruction:
      "Create a virtual environment /app/venv and install into it a package `mypkg` version 1.0 with a function `greet(name)` returning 'hello, <name>' and a console script `mypkg-hello` printing greet(<its argument>). The system python must not see mypkg.\n",
    solve: VENV_SOLVE,
    test: pytestSh("/app"),
    files: {
      "tests/test_outputs.py": `import subprocess

VENV_PYTHON = "/app/venv/bin/python"


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def test_is_a_venv():
    r = run(VENV_PYTHON, "-c", "import sys; print(sys.prefix != sys.base_prefix, sys.prefix)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "/app/venv"]


def test_package_imports():
    r = run(VENV_PYTHON, "-c", "import mypkg; print(mypkg.greet('proctor'))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "hello, proctor"


def test_package_metadata():
    r = run(VENV_PYTHON, "-c", "import importlib.metadata as m; print(m.version('mypkg'), [e.name for e in m.entry_points(group='console_scripts') if e.value == 'mypkg:main'])")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1.0 ['mypkg-hello']"


def test_console_script():
    r = run("/app/venv/bin/mypkg-hello", "world")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "hello, world"


def test_system_python_does_not_see_it():
    assert run("python3", "-c", "import mypkg").returncode != 0
`,
    },
  },

  // TB2 tasks whose tests run in the environment the agent built: test.sh activates /app/venv
  // and runs pytest with its python, the tests importing the installed package directly (fresh).
  "venv-runs-tests": {
    toml: TOML,
    instruction:
      "Create a virtual environment /app/venv (with the system's site packages, so pytest is there) and install into it a package `mypkg` version 1.0 with a function `greet(name)` returning 'hello, <name>' and a console script `mypkg-hello` printing greet(<its argument>). The tests run inside that environment.\n",
    solve: VENV_SOLVE,
    test: [". /app/venv/bin/activate", "cd /app", "python -m pytest -rA /tests/test_outputs.py", "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi"].join("\n"),
    files: {
      "tests/test_outputs.py": `import importlib.metadata
import shutil
import subprocess
import sys

import mypkg


def test_runs_in_the_venv():
    assert sys.prefix == "/app/venv"


def test_package():
    assert mypkg.greet("proctor") == "hello, proctor"
    assert importlib.metadata.version("mypkg") == "1.0"


def test_console_script_on_path():
    assert shutil.which("mypkg-hello") == "/app/venv/bin/mypkg-hello"
    r = subprocess.run(["mypkg-hello", "world"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "hello, world"
`,
    },
  },

  // TB2 "write a parser module" tasks: the agent's module is /app/parser.py (a name Python 3.9
  // had in its standard library, gone since 3.10), imported by the tests from /app and run as a
  // script (fresh).
  "parser-module": {
    toml: TOML,
    instruction:
      "Write /app/parser.py with a function `parse_line(line)` that parses a settings line `key = value` into a (key, value) pair of stripped strings, and None for blank lines and `#` comments. Run as a script with a file argument it prints the number of settings in the file.\n",
    solve: put(
      "/app/parser.py",
      'import sys\n\n\ndef parse_line(line):\n    line = line.strip()\n    if not line or line.startswith("#"):\n        return None\n    key, value = line.split("=", 1)\n    return key.strip(), value.strip()\n\n\nif __name__ == "__main__":\n    with open(sys.argv[1]) as f:\n        print(sum(1 for line in f if parse_line(line)))\n',
    ),
    test: pytestSh("/app"),
    files: {
      "tests/settings.conf": "# service settings\nname = proctor\n\ntimeout = 30\nretries=3\n",
      "tests/test_outputs.py": `import subprocess
import sys

sys.path.insert(0, "/app")

from parser import parse_line  # noqa: E402


def test_parse_line():
    assert parse_line("timeout = 30") == ("timeout", "30")
    assert parse_line("  # a comment") is None
    assert parse_line("") is None


def test_script():
    r = subprocess.run(["python3", "/app/parser.py", "/tests/settings.conf"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "3"
`,
    },
  },

  // TB2's git tasks on a repository the image ships (/app/project, one commit on main): the
  // solution commits a file on a new branch; the tests inspect it with git log / branch /
  // status --porcelain / show (fresh, built image).
  "git-commit-branch": {
    toml: TOML,
    instruction:
      "In the git repository /app/project, create a branch feature/greeting from main and commit on it a file greeting.txt containing 'Hello, Proctor!' with the message 'Add greeting', authored by Ada Lovelace <ada@example.com>. Leave the branch checked out and the work tree clean.\n",
    solve: [
      "set -e",
      "cd /app/project",
      "git checkout -q -b feature/greeting",
      "echo 'Hello, Proctor!' > greeting.txt",
      "git add greeting.txt",
      "git -c user.name='Ada Lovelace' -c user.email=ada@example.com commit -q -m 'Add greeting'",
    ].join("\n"),
    test: pytestSh("/tests"),
    files: {
      "environment/Dockerfile": HONEST_DOCKERFILE,
      "tests/test_outputs.py": `import subprocess


def git(*args):
    r = subprocess.run(["git", "-C", "/app/project", *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_branch():
    assert git("branch", "--show-current").strip() == "feature/greeting"
    assert sorted(b.strip("* ").strip() for b in git("branch", "--list").splitlines()) == ["feature/greeting", "main"]


def test_commit():
    assert git("log", "--format=%an <%ae>|%s", "main..feature/greeting").splitlines() == ["Ada Lovelace <ada@example.com>|Add greeting"]
    assert git("show", "feature/greeting:greeting.txt") == "Hello, Proctor!\\n"
    assert git("rev-list", "--count", "main").strip() == "1"


def test_clean_work_tree():
    assert git("status", "--porcelain") == ""
`,
    },
  },

  // The same with a repository the solution makes: git init /app, commits on main and on a
  // release branch, then main checked out again (fresh).
  "git-init-workdir": {
    toml: TOML,
    instruction:
      "Make /app a git repository (branch main) with a commit 'Add notes' adding NOTES.md and a .gitignore ignoring __pycache__/, then a branch release with a commit 'Release 1.0.0' adding VERSION (1.0.0). Leave main checked out and the work tree clean.\n",
    solve: [
      "set -e",
      "cd /app",
      "git init -q -b main",
      "printf '# Notes\\n\\nship it\\n' > NOTES.md",
      "printf '__pycache__/\\n' > .gitignore",
      "git add NOTES.md .gitignore",
      "git -c user.name='Ada Lovelace' -c user.email=ada@example.com commit -q -m 'Add notes'",
      "git checkout -q -b release",
      "echo 1.0.0 > VERSION",
      "git add VERSION",
      "git -c user.name='Ada Lovelace' -c user.email=ada@example.com commit -q -m 'Release 1.0.0'",
      "git checkout -q main",
    ].join("\n"),
    test: pytestSh("/tests"),
    files: {
      "tests/test_outputs.py": `import subprocess


def git(*args):
    r = subprocess.run(["git", "-C", "/app", *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_branches():
    assert git("branch", "--show-current").strip() == "main"
    assert sorted(b.strip("* ").strip() for b in git("branch", "--list").splitlines()) == ["main", "release"]


def test_history():
    assert git("log", "--format=%s", "release").splitlines() == ["Release 1.0.0", "Add notes"]
    assert git("log", "--format=%s", "main").splitlines() == ["Add notes"]
    assert git("show", "release:VERSION") == "1.0.0\\n"


def test_clean_work_tree():
    assert git("status", "--porcelain") == ""
`,
    },
  },

  // TB2 test.sh files that run pytest from /tests (`cd /tests && python3 -m pytest -q
  // test_outputs.py`), importing a helper module beside the test file: pytest wants to write
  // .pytest_cache and __pycache__ there (fresh).
  "tests-from-tests-dir": {
    toml: TOML,
    instruction: "Write the prime numbers below 50 into /app/primes.txt, one per line, in increasing order.\n",
    solve: 'python3 -c "print(*[n for n in range(2, 50) if all(n % d for d in range(2, n))], sep=chr(10))" > /app/primes.txt',
    test: ["cd /tests && python3 -m pytest -q test_outputs.py", "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi"].join("\n"),
    files: {
      "tests/expected.py": "PRIMES = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47]\n",
      "tests/test_outputs.py": `from expected import PRIMES


def test_primes():
    with open("/app/primes.txt") as f:
        assert [int(line) for line in f.read().split()] == PRIMES
`,
    },
  },

  // TB2's "fix the bug in the module /app ships" shape: the image ships /app/calc.py (and its
  // bytecode, compiled at build time); the solution fixes `a - b` to `a + b` in place, the file
  // keeping its size; the tests import the module (fresh, built image).
  "same-size-module-edit": {
    toml: TOML,
    instruction: "/app/calc.py's add() subtracts. Fix it.\n",
    solve: `python3 - <<'PROCTOR_EOF'
with open("/app/calc.py", "r+") as f:
    source = f.read()
    fixed = source.replace("return a - b", "return a + b")
    assert fixed != source and len(fixed) == len(source)
    f.seek(0)
    f.write(fixed)
PROCTOR_EOF`,
    test: pytestSh("/app"),
    files: {
      "environment/Dockerfile": HONEST_DOCKERFILE,
      "tests/test_outputs.py": `import subprocess
import sys

sys.path.insert(0, "/app")

import calc  # noqa: E402


def test_add():
    assert calc.add(2, 3) == 5


def test_add_in_a_new_interpreter():
    r = subprocess.run(["python3", "-c", "import sys; sys.path.insert(0, '/app'); import calc; print(calc.add(40, 2))"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "42"
`,
    },
  },

  // TB2's "install a command-line tool on PATH" shape: the solution writes
  // /usr/local/bin/wordfreq (a Python script); the tests find it on PATH and run it (shared: the
  // tests name /usr/local/bin/wordfreq).
  "tool-on-path": {
    toml: TOML,
    shared: true,
    instruction: "Install a command `wordfreq` at /usr/local/bin/wordfreq: `wordfreq N FILE` prints the N most frequent words of FILE as `<count> <word>` lines, most frequent first, ties in alphabetical order.\n",
    solve: [
      put(
        "/usr/local/bin/wordfreq",
        "#!/usr/bin/env python3\nimport collections\nimport sys\n\nn, path = int(sys.argv[1]), sys.argv[2]\nwith open(path) as f:\n    counts = collections.Counter(f.read().split())\nfor word, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]:\n    print(count, word)\n",
      ),
      "chmod 755 /usr/local/bin/wordfreq",
    ].join("\n"),
    test: pytestSh("/app"),
    files: {
      "tests/sample.txt": SAMPLE_TEXT,
      "tests/test_outputs.py": `import shutil
import subprocess


def test_on_path():
    assert shutil.which("wordfreq") == "/usr/local/bin/wordfreq"


def test_counts():
    r = subprocess.run(["wordfreq", "3", "/tests/sample.txt"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["4 the", "2 dog", "2 fox"]
`,
    },
  },

  // TB2's "serve an API under a local name" shape: the solution adds api.internal to /etc/hosts
  // and runs python's http.server under a small wrapper that writes /run/apisvc.pid and an access
  // log in /var/log/apisvc; the tests check the hosts entry, resolve the name, fetch by name, read
  // the pid file as /var/run/apisvc.pid and the access log (shared: the tests name /etc/hosts).
  "hosts-service": {
    toml: TOML,
    shared: true,
    service: true,
    instruction:
      "Serve the directory /app/site over HTTP on port 8081 under the name api.internal (add it to /etc/hosts for 127.0.0.1), with /status.json returning {\"status\": \"ok\"}. Keep the server's pid in /var/run/apisvc.pid and log each request to /var/log/apisvc/access.log.\n",
    solve: [
      "echo '127.0.0.1 api.internal' >> /etc/hosts",
      put("/app/site/status.json", '{"status": "ok"}\n'),
      put(
        "/opt/apisvc/server.py",
        `import functools
import http.server
import os

os.makedirs("/var/log/apisvc", exist_ok=True)
log = open("/var/log/apisvc/access.log", "a", buffering=1)


class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        log.write("%s - - [%s] %s\\n" % (self.client_address[0], self.log_date_time_string(), format % args))


with open("/run/apisvc.pid", "w") as f:
    f.write("%d\\n" % os.getpid())
http.server.ThreadingHTTPServer(("0.0.0.0", 8081), functools.partial(Handler, directory="/app/site")).serve_forever()
`,
      ),
      "setsid python3 /opt/apisvc/server.py >/dev/null 2>&1 </dev/null &",
      waitForPort(8081),
    ].join("\n"),
    test: pytestSh("/app"),
    files: {
      "tests/test_outputs.py": `import json
import os
import socket
import time
import urllib.request


def test_hosts_entry():
    with open("/etc/hosts") as f:
        assert any(line.split()[:2] == ["127.0.0.1", "api.internal"] for line in f if line.strip())
    assert socket.gethostbyname("api.internal") == "127.0.0.1"


def test_status_by_name():
    body = urllib.request.urlopen("http://api.internal:8081/status.json", timeout=10).read()
    assert json.loads(body) == {"status": "ok"}


def test_pid_file():
    with open("/var/run/apisvc.pid") as f:
        pid = int(f.read().strip())
    os.kill(pid, 0)
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        assert b"server.py" in f.read()


def test_access_log():
    urllib.request.urlopen("http://api.internal:8081/status.json?probe=1", timeout=10).read()
    for _ in range(50):
        with open("/var/log/apisvc/access.log") as f:
            if "GET /status.json?probe=1" in f.read():
                return
        time.sleep(0.1)
    raise AssertionError("the request is not in /var/log/apisvc/access.log")
`,
    },
  },
};

/** Write HONEST_TASKS (with their extra files) as native task dirs under `root`; returns root. */
export async function writeHonestTasks(root: string, tasks: Record<string, HonestTask> = HONEST_TASKS): Promise<string> {
  await writeTasks(root, tasks);
  for (const [id, task] of Object.entries(tasks)) {
    for (const [rel, content] of Object.entries(task.files ?? {})) {
      const path = join(root, id, rel);
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, content);
      if (rel.endsWith(".sh")) await chmod(path, 0o755);
    }
  }
  return root;
}

/**
 * The SWE-bench rows' --env-setup: the install compiles the package to bytecode (as
 * `pip install -e .` or a first import leaves it), so a fix that keeps a module's size is told
 * apart from the base commit by its content only (Python trusts a .pyc whose recorded source size
 * and mtime second match).
 */
export const SWE_ENV_SETUP = `${JSON.stringify({ "acme/calc": { "*": { install: ["python3 -m compileall -q calc"] } } }, null, 2)}\n`;

/**
 * SWE-bench rows on the swe-calc fixture whose gold patches are same-size, in-place edits of one
 * character in calc/ops.py: `return a + b  # bug` -> `return a * b  # bug` (mul) and
 * `return a  # bug` -> `return -a # bug` (neg). FAIL_TO_PASS / PASS_TO_PASS from the fixture's
 * test patches. Two rows: whether the edit lands within the install's second is up to the clock.
 */
export const SWE_SAME_SIZE_ROWS = [
  { id: "calc-mul-same-size", before: "return a + b  # bug", after: "return a * b  # bug", test: "testMul", failToPass: "tests/test_ops.py::test_mul", problem: "mul adds instead of multiplying" },
  { id: "calc-neg-same-size", before: "return a  # bug", after: "return -a # bug", test: "testNeg", failToPass: "tests/test_ops.py::test_neg", problem: "neg returns its argument" },
] as const;

/** The SWE_SAME_SIZE_ROWS as rows of `swe` (load them with SWE_ENV_SETUP as --env-setup); `scratch` is an empty dir to clone into. */
export function sameSizeSweRows(swe: SweCalcFixture, scratch: string): SweCalcRow[] {
  const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd: scratch, encoding: "utf8" });
  git("clone", "--quiet", join(swe.mirrors, "acme__calc.git"), "calc");
  git("-C", "calc", "checkout", "--quiet", swe.base);
  const ops = join(scratch, "calc", "calc", "ops.py");
  return SWE_SAME_SIZE_ROWS.map((row) => {
    const fixed = CALC_OPS.replace(row.before, row.after);
    if (fixed.length !== CALC_OPS.length || fixed === CALC_OPS) throw new Error(`${row.id}: not a same-size edit`);
    execFileSync("sh", ["-c", 'printf "%s" "$1" > "$2"', "sh", fixed, ops]);
    const patch = git("-C", "calc", "diff");
    git("-C", "calc", "checkout", "--quiet", "--", ".");
    return { id: row.id, patch, testPatch: swe.patches[row.test], failToPass: [row.failToPass], passToPass: ["tests/test_ops.py::test_add"], problem: row.problem };
  });
}
