import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { tempDir } from "../testing/fixtures";
import { portsTestsServe } from "./ports";

describe("ports the tests serve on themselves", () => {
  test("a helper server the tests start (by a file that serves, or a line that does), not the ports they only connect to", async () => {
    const root = await tempDir("proctor-ports-");
    try {
      const tests = join(root.path, "tests");
      await mkdir(tests);
      await writeFile(join(tests, "test.sh"), "python3 /tests/helper.py 8765 &\ncurl -fsS http://127.0.0.1:8080/status\npytest /tests/test_outputs.py\n");
      await writeFile(join(tests, "helper.py"), "import http.server, sys\nhttp.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), None).serve_forever()\n");
      await writeFile(join(tests, "test_outputs.py"), "import socket, requests\ndef test_proxy():\n    up = socket.socket(); up.bind(('127.0.0.1', 9000)); up.listen()\n    assert requests.get('http://localhost:8080/').ok\n");
      expect([...(await portsTestsServe(tests, "bash /tests/test.sh"))].sort()).toEqual([8765, 9000]);
      // An honest service task: the tests only talk to the agent's server.
      await writeFile(join(root.path, "t2.sh"), "curl http://localhost:8080/server-status\n");
      expect([...(await portsTestsServe(null, "curl -fsS http://localhost:8080/server-status && nc -z localhost 2222"))]).toEqual([]);
    } finally {
      await root.cleanup();
    }
  });
});
