"""A throwaway JupyterHub on 127.0.0.1 for measuring a room of students on one machine.

``LocalHub`` writes a test-only hub config (JSON, so nothing in it runs on load) into a temporary
folder, starts ``jupyterhub`` with it (the hub starts configurable-http-proxy itself), waits until
the REST API answers, and on ``stop()`` shuts the hub down, which stops the students' servers and
the proxy; any process of that tree still alive after a grace period is killed, and the folder is
deleted.

The config is for the measurement only: SharedPasswordAuthenticator with a random password for a
fixed list of students, and SimpleLocalProcessSpawner (every student is the same system user, in
their own home folder; no isolation and no limits). The config a teacher deploys is
``deploy/jupyterhub_config.py``; ``auth`` puts its authentication sections in place of the test
password (``tests/test_hub.py`` signs up under the admin's name through it), and ``before_start``
runs on the written config before the hub starts (``deploy/hub_admin.py``, as a teacher's setup).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import requests

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port nothing listens on right now, on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def hub_config(workdir: Path, students: list[str], password: str, environment: dict[str, str],
               ports: dict[str, int], auth: dict | None = None) -> dict:
    """The test hub's config as traitlets JSON: every listener on 127.0.0.1, one home per student.
    ``auth``: sections that replace the test password's (``JupyterHub``'s settings are merged)."""
    spawner_args = []
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # jupyter-server refuses root without this
        spawner_args.append("--ServerApp.allow_root=True")
    config = {
        "JupyterHub": {
            "bind_url": f"http://{LOOPBACK}:{ports['public']}/",
            "hub_bind_url": f"http://{LOOPBACK}:{ports['hub']}",
            "authenticator_class": "shared-password",
            "spawner_class": "simple",
            "db_url": f"sqlite:///{(workdir / 'jupyterhub.sqlite').as_posix()}",
            "cookie_secret_file": str(workdir / "jupyterhub_cookie_secret"),
            "pid_file": str(workdir / "jupyterhub.pid"),
            "cleanup_servers": True,
            "cleanup_proxy": True,
        },
        "ConfigurableHTTPProxy": {
            "api_url": f"http://{LOOPBACK}:{ports['proxy_api']}",
            "pid_file": str(workdir / "proxy.pid"),
        },
        "SharedPasswordAuthenticator": {"user_password": password},
        "Authenticator": {"allowed_users": students},
        "SimpleLocalProcessSpawner": {
            "home_dir_template": str(workdir / "homes" / "{username}"),
        },
        "Spawner": {
            "ip": LOOPBACK,
            # this interpreter's jupyterhub-singleuser, so the kernels get the lab's environment
            "cmd": [sys.executable, "-m", "jupyterhub.singleuser"],
            "args": spawner_args,
            "environment": environment,
            "start_timeout": 180,
            "http_timeout": 180,
        },
    }
    if auth is not None:
        auth = dict(auth)
        del config["SharedPasswordAuthenticator"], config["Authenticator"]
        config["JupyterHub"].update(auth.pop("JupyterHub", {}))
        config.update(auth)
    return config



def _kill_processes_under(folder) -> None:
    """Kill every process whose working folder or command line lies in ``folder`` (a folder this
    module made with ``mkdtemp``: whatever runs from it was started by the hub it holds)."""
    folder = str(folder)
    doomed = []
    for proc in psutil.process_iter(["cwd", "cmdline"]):
        try:
            cwd, cmdline = proc.info["cwd"] or "", " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if proc.pid != os.getpid() and (folder in cwd or folder in cmdline):
            doomed.append(proc)
    for proc in doomed:
        try:
            proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    psutil.wait_procs(doomed, timeout=10)

class LocalHub:
    """Start and stop one throwaway hub; use as a context manager so it always stops."""

    def __init__(self, students: list[str], notebooks: Path, environment: dict[str, str],
                 start_timeout: float = 120.0, auth: dict | None = None,
                 before_start: Callable[[Path], None] | None = None):
        if not students:
            raise ValueError("students: expected at least one student name, got an empty list")
        self.students = students
        self.notebooks = Path(notebooks)
        if not (self.notebooks / "02_grpo.ipynb").is_file():
            raise ValueError(f"notebooks: {self.notebooks} has no 02_grpo.ipynb; expected the "
                             "lab's notebooks/ folder")
        self.environment = environment
        self.start_timeout = start_timeout
        self.auth = auth
        self.before_start = before_start
        self.password = secrets.token_urlsafe(18)
        self.workdir: Path | None = None
        self.process: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.url = ""

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:  # the log goes with the temporary dir: show it first
            print(f"jupyterhub log (last lines):\n{self.log_tail()}", file=sys.stderr)
        self.stop()

    def start(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="grpo-lab-hub-"))
        for name in self.students:  # each student gets their own copy, as nbgitpuller would
            shutil.copytree(self.notebooks, self.workdir / "homes" / name / "notebooks",
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        ports = {"public": free_port(), "hub": free_port(), "proxy_api": free_port()}
        config = hub_config(self.workdir, self.students, self.password, self.environment, ports,
                            self.auth)
        config_path = self.workdir / "hub_config.json"
        config_path.write_text(json.dumps(config, indent=1))
        if self.before_start is not None:
            self.before_start(config_path)
        self.url = f"http://{LOOPBACK}:{ports['public']}"
        self.log_path = self.workdir / "jupyterhub.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", str(config_path)],
                cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)
        self._wait_until_up()

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyterhub exited with code {self.process.returncode} while "
                                   f"starting:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.url}/hub/api/", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass  # the proxy or the hub is not listening yet
            time.sleep(0.5)
        raise TimeoutError(f"jupyterhub did not answer within {self.start_timeout:.0f} s:\n"
                           f"{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no hub log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace: float = 30.0) -> None:
        """Stop the hub (which stops the servers and the proxy), kill leftovers, delete the dir."""
        if self.process is not None:
            try:
                tree = psutil.Process(self.process.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                tree = []
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=10)
            # the hub's own cleanup ends these; anything it missed must not outlive the run
            _, alive = psutil.wait_procs(tree, timeout=5)
            for proc in alive:
                try:
                    proc.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(alive, timeout=5)
            self.process = None
        if self.workdir is not None:
            # a kernel that left the hub's tree before the snapshot above (a restart, a server
            # that exited first and orphaned it) still runs from a student's home: ours to end
            _kill_processes_under(self.workdir)
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
