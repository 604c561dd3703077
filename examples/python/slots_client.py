"""A stdlib-only client for Proctor's slots API (`proctor serve --slots ...`).

    from slots_client import SlotsClient
    client = SlotsClient("http://127.0.0.1:8080", token=os.environ["PROCTOR_TOKEN"])
    with client.acquire(task="greeting-file") as slot:
        print(slot.exec("echo hi")["stdout"])
        print(slot.verify()["reward"])

Auth: a bearer token (`proctor serve --auth token`, tokens from $PROCTOR_TOKENS), or none for a
loopback server started with `--auth none`. Epistula (sr25519 hotkey signatures) needs a
signing library and is not done here; use a token for Python pipelines.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterator, Optional, Sequence, Union

Command = Union[str, Sequence[str]]


class SlotsError(Exception):
    """An error answer from the server: `status` (HTTP), `code` and `message` from its JSON body."""

    def __init__(self, status: int, code: str, message: str, retry_after: Optional[float] = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


class SlotsClient:
    def __init__(self, base_url: str, token: Optional[str] = None, timeout_s: float = 900.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    # -- HTTP -----------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, raw: Optional[bytes] = None,
                query: Optional[dict] = None) -> tuple[int, bytes, Any]:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {}
        data = None
        if raw is not None:
            data = raw
            headers["content-type"] = "application/octet-stream"
        elif body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["content-type"] = "application/json"
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as response:
                return response.status, response.read(), response.headers
        except urllib.error.HTTPError as error:
            payload = error.read()
            try:
                parsed = json.loads(payload)
                code, message = parsed.get("error", "error"), parsed.get("message", "")
            except ValueError:
                code, message = "error", payload.decode("utf-8", "replace")[:500]
            retry = error.headers.get("retry-after")
            raise SlotsError(error.code, code, message, float(retry) if retry else None) from None

    def json(self, method: str, path: str, body: Any = None, query: Optional[dict] = None) -> Any:
        _, payload, _ = self.request(method, path, body=body, query=query)
        return json.loads(payload) if payload else None

    # -- slots ----------------------------------------------------------------------------------
    def acquire(self, image: Optional[str] = None, task: Optional[str] = None,
                repo: Optional[dict] = None, env: Optional[dict] = None, ttl_s: Optional[float] = None,
                wait_s: float = 300.0) -> "Slot":
        """A new slot. While the pool is exhausted (503), retries after the server's Retry-After, up to wait_s."""
        body = {k: v for k, v in {"image": image, "task": task, "repo": repo, "env": env, "ttl_s": ttl_s}.items() if v is not None}
        deadline = time.monotonic() + wait_s
        while True:
            try:
                info = self.json("POST", "/v1/slots", body)
                return Slot(self, info)
            except SlotsError as error:
                if error.status != 503 or time.monotonic() >= deadline:
                    raise
                time.sleep(min(error.retry_after or 1.0, max(0.0, deadline - time.monotonic())))

    def pool(self) -> dict:
        return self.json("GET", "/v1/pool")


class Slot:
    def __init__(self, client: SlotsClient, info: dict):
        self.client = client
        self.id: str = info["slot_id"]
        self.sandbox_id: str = info["sandbox_id"]
        self.workdir: str = info["workdir"]
        self.expires_at: str = info["expires_at"]
        self.released = False

    def _path(self, suffix: str = "") -> str:
        return f"/v1/slots/{urllib.parse.quote(self.id)}{suffix}"

    def exec(self, command: Command, timeout_s: Optional[float] = None, env: Optional[dict] = None,
             cwd: Optional[str] = None, stdin: Optional[str] = None, max_output_bytes: Optional[int] = None) -> dict:
        """Runs a shell string (`sh -c`) or an argv list. Returns exit_code, stdout, stderr, timed_out, duration_ms, truncated."""
        return self.client.json("POST", self._path("/exec"), _exec_body(command, timeout_s, env, cwd, stdin, max_output_bytes))

    def exec_stream(self, command: Command, timeout_s: Optional[float] = None) -> Iterator[dict]:
        """Yields {"stdout": ...} / {"stderr": ...} as the command writes, then the result (exit_code, ...)."""
        url = self.client.base_url + self._path("/exec") + "?stream=1"
        headers = {"content-type": "application/json"}
        if self.client.token:
            headers["authorization"] = f"Bearer {self.client.token}"
        data = json.dumps(_exec_body(command, timeout_s, None, None, None, None)).encode("utf-8")
        req = urllib.request.Request(url, data=data, method="POST", headers=headers)
        with urllib.request.urlopen(req, timeout=self.client.timeout_s) as response:
            for line in response:
                if line.strip():
                    yield json.loads(line)

    def batch(self, commands: Sequence[Union[Command, dict]]) -> list:
        """Runs the commands in order; one result per command."""
        return self.client.json("POST", self._path("/batch"), {"commands": list(commands)})["results"]

    def write_file(self, path: str, data: Union[bytes, str]) -> None:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        self.client.request("PUT", self._path("/files"), raw=raw, query={"path": path})

    def read_file(self, path: str) -> Optional[bytes]:
        try:
            _, payload, _ = self.client.request("GET", self._path("/files"), query={"path": path})
            return payload
        except SlotsError as error:
            if error.status == 404 and error.code == "not_found":
                return None
            raise

    def verify(self) -> dict:
        """Runs the slot's task tests; returns reward, resolved, tests (the slot stays yours).

        For a SWE instance, tests is a list of {name, status, expected ("FAIL_TO_PASS" or
        "PASS_TO_PASS")}; for a task graded by a reward file it is None.
        """
        return self.client.json("POST", self._path("/verify"), {})

    def release(self, reset: bool = True) -> None:
        if self.released:
            return
        self.released = True
        self.client.request("DELETE", self._path(), query={"reset": "true" if reset else "false"})

    def __enter__(self) -> "Slot":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _exec_body(command: Command, timeout_s, env, cwd, stdin, max_output_bytes) -> dict:
    body: dict = {"command": command if isinstance(command, str) else list(command)}
    for key, value in (("timeout_s", timeout_s), ("env", env), ("cwd", cwd), ("stdin", stdin), ("max_output_bytes", max_output_bytes)):
        if value is not None:
            body[key] = value
    return body
