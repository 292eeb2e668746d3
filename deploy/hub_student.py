"""One student's path through a JupyterHub, over HTTP: log in, get a token, start a server.

``HubStudent`` logs in through the hub's login form (as a browser does: the form's ``_xsrf``
field and cookie), asks the hub's REST API for an API token with that login cookie, starts its
own single-user server through the REST API with the token, waits until the hub reports it ready,
and opens notebooks on it through the server's REST API (``/api/sessions``, which starts a kernel
whose working folder is the notebook's). Every request has a timeout; every wait a deadline.
"""

from __future__ import annotations

import time
from urllib.parse import quote

import requests

REQUEST_TIMEOUT = 60.0


class HubStudent:
    def __init__(self, hub_url: str, name: str, password: str):
        self.hub_url = hub_url.rstrip("/")
        self.name = name
        self.password = password
        self.http = requests.Session()
        self.token = ""
        self.server_url = ""

    def log_in(self) -> None:
        """Post the login form; raises PermissionError when the hub refuses the password."""
        login = f"{self.hub_url}/hub/login"
        self.http.get(login, timeout=REQUEST_TIMEOUT).raise_for_status()
        xsrf = self.http.cookies.get("_xsrf", "")
        reply = self.http.post(login, timeout=REQUEST_TIMEOUT, allow_redirects=False,
                               data={"username": self.name, "password": self.password,
                                     "_xsrf": xsrf})
        if reply.status_code != 302:
            raise PermissionError(f"the hub refused {self.name!r}'s login (HTTP "
                                  f"{reply.status_code})")

    def request_token(self, expires_in: int = 3600) -> str:
        """An API token for this student, asked for with the login cookie (needs ``log_in``)."""
        reply = self.http.post(
            f"{self.hub_url}/hub/api/users/{quote(self.name)}/tokens", timeout=REQUEST_TIMEOUT,
            headers={"X-XSRFToken": self.http.cookies.get("_xsrf", "")},
            json={"note": "grpo-lab hub measurement", "expires_in": expires_in})
        reply.raise_for_status()
        self.token = reply.json()["token"]
        return self.token

    def _api(self, method: str, url: str, **kwargs) -> requests.Response:
        reply = requests.request(method, url, timeout=REQUEST_TIMEOUT,
                                 headers={"Authorization": f"token {self.token}"}, **kwargs)
        reply.raise_for_status()
        return reply

    def start_server(self, timeout: float = 180.0) -> str:
        """Ask the hub to start this student's server; return its URL once the hub says ready."""
        user_api = f"{self.hub_url}/hub/api/users/{quote(self.name)}"
        self._api("POST", f"{user_api}/server")  # 201 started, 202 still starting
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            server = self._api("GET", user_api).json()["servers"].get("", {})
            if server.get("ready"):
                self.server_url = f"{self.hub_url}{server['url']}"
                return self.server_url
            time.sleep(0.5)
        raise TimeoutError(f"{self.name}'s server was not ready within {timeout:.0f} s")

    def open_notebook(self, path: str) -> str:
        """Open ``path`` (relative to the student's home) with a python3 kernel; the kernel id."""
        reply = self._api("POST", f"{self.server_url}api/sessions", json={
            "path": path, "name": path.rsplit("/", 1)[-1], "type": "notebook",
            "kernel": {"name": "python3"}})
        return reply.json()["kernel"]["id"]

    def kernel_ws_url(self, kernel_id: str) -> str:
        return f"{self.server_url.replace('http', 'ws', 1)}api/kernels/{kernel_id}/channels"

    def stop_server(self) -> None:
        self._api("DELETE", f"{self.hub_url}/hub/api/users/{quote(self.name)}/server")
