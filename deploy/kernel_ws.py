"""Run code in a Jupyter kernel through a Jupyter server's kernel websocket, as JupyterLab does.

The server relays the kernel's channels over ``/api/kernels/<id>/channels`` as JSON text frames
(each message carries its ``channel``). ``KernelClient.execute`` sends an ``execute_request`` on
the shell channel and collects, for that request only, the stream output from iopub until the
kernel reports idle and the shell reply has arrived. An error reply raises ``CellError`` with the
kernel's traceback; every wait is bounded by a deadline.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import datetime, timezone

import websocket

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PROTOCOL_VERSION = "5.3"


class CellError(RuntimeError):
    """The kernel raised an exception while running a cell."""


class KernelClient:
    """One websocket to one kernel, authenticated with a token header."""

    def __init__(self, ws_url: str, token: str, connect_timeout: float = 60.0):
        self.session = uuid.uuid4().hex
        self.ws = websocket.create_connection(
            f"{ws_url}?session_id={self.session}", timeout=connect_timeout,
            header=[f"Authorization: token {token}"])

    def close(self) -> None:
        self.ws.close()

    def _message(self, msg_type: str, content: dict) -> dict:
        return {"header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type,
                           "session": self.session, "username": "student",
                           "date": datetime.now(timezone.utc).isoformat(),
                           "version": PROTOCOL_VERSION},
                "parent_header": {}, "metadata": {}, "content": content, "buffers": [],
                "channel": "shell"}

    def _receive(self, deadline: float, what: str) -> dict:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no answer from the kernel for {what} before the deadline")
        self.ws.settimeout(remaining)
        try:
            frame = self.ws.recv()
        except websocket.WebSocketTimeoutException:
            raise TimeoutError(f"no answer from the kernel for {what} before the deadline") from None
        return json.loads(frame)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Ask for kernel_info until the kernel answers (a new kernel may miss the first ask)."""
        deadline = time.monotonic() + timeout
        while True:
            request = self._message("kernel_info_request", {})
            self.ws.send(json.dumps(request))
            retry = min(deadline, time.monotonic() + 5.0)
            try:
                while True:
                    msg = self._receive(retry, "kernel_info")
                    if (msg.get("msg_type") == "kernel_info_reply"
                            and msg["parent_header"].get("msg_id") == request["header"]["msg_id"]):
                        return
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"the kernel did not answer kernel_info in {timeout:.0f} s") from None

    def execute(self, code: str, timeout: float) -> str:
        """Run ``code``; return its stdout (and stderr) text. Raises CellError or TimeoutError."""
        request = self._message("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True})
        msg_id = request["header"]["msg_id"]
        self.ws.send(json.dumps(request))
        deadline = time.monotonic() + timeout
        output, reply, idle = [], None, False
        while reply is None or not idle:
            msg = self._receive(deadline, f"the cell starting {code[:60]!r}")
            if msg["parent_header"].get("msg_id") != msg_id:
                continue  # another request's message (kernel_info retries, for one)
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                output.append(content["text"])
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
            elif kind == "execute_reply":
                reply = content
        if reply["status"] != "ok":
            traceback = ANSI.sub("", "\n".join(reply.get("traceback", [])))
            raise CellError(f"{reply.get('ename')}: {reply.get('evalue')}\n{traceback}\n"
                            f"in the cell:\n{code}")
        return "".join(output)
