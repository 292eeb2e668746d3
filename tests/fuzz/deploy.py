"""Surface 11: the classroom deployment in ``deploy/``. Nothing shipped opens a hub or a server
without authentication: every shipped hub configuration (the one-server config, the Zero to
JupyterHub values, the TLJH commands of deploy/README.md) names NativeAuthenticator with the
teacher's approval; the image starts the hub-authenticated single-user server; no shipped file
turns a token or password off or listens on every interface. A weak authenticator (dummy, null,
shared password) appears only in the local test harness (``deploy/local_hub.py``), which only the
measurement script and the tests import, and which listens on 127.0.0.1 behind a random
password for a fixed list of students."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from fuzz.harness import Case

SURFACE = 11
ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NATIVE = "nativeauthenticator.NativeAuthenticator"
#: Authenticators that let anyone in (dummy, null) or share one password between users.
WEAK_AUTH = re.compile(r"dummy|nullauthenticator|null-authenticator|shared.?password|"
                       r"allow_any|AllowAll", re.IGNORECASE)
#: Settings that switch a Jupyter server's own authentication off or open it to the network.
OPEN_SERVER = re.compile(r"""(?:ServerApp|NotebookApp)\.(?:token|password)\s*=\s*(?:''|""|\s|$)|"""
                         r"disable_check_xsrf\s*=\s*True|--ip[= ]0\.0\.0\.0|"
                         r"open_signup\s*[:=]\s*(?:True|true)|--no-auth|allow_unauthenticated",
                         re.IGNORECASE)
#: Where a weak authenticator may appear: the measurement harness and the tests.
HARNESS = {"deploy/local_hub.py", "deploy/measure_hub.py", "deploy/README.md"}


def tracked_files() -> list[str]:
    """The repository's tracked text files outside the test suite (what a clone ships)."""
    listing = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split("\n")
    return [f for f in listing if f and not f.startswith(("tests/", "data/"))
            and Path(f).suffix in {".py", ".md", ".yaml", ".yml", ".txt", ".toml", ".cfg",
                                   ".json", ""} and (ROOT / f).is_file()]


def _scan(pattern):
    hits = []
    for name in tracked_files():
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace")
        hits += [(name, m.group(0)) for m in pattern.finditer(text)]
    return hits


def _only_in_harness(hits):
    outside = [hit for hit in hits if hit[0] not in HARNESS]
    assert not outside, f"weak or disabled authentication outside the test harness: {outside}"
    # the README may only describe the harness, in a sentence that says it is test-only
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    for match in WEAK_AUTH.finditer(readme):
        line = readme[readme.rfind("\n", 0, match.start()) + 1: readme.find("\n", match.end())]
        context = readme[max(0, match.start() - 300): match.end() + 300]
        assert "test" in context.lower(), f"README mentions {match.group(0)} outside a test: {line}"


def _none(hits):
    assert not hits, f"found {hits}"


def _one_server_config():
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("jupyterhub_config.py", path=str(DEPLOY)).load_config()


def _native_with_approval(c):
    assert c.JupyterHub.authenticator_class == NATIVE, c.JupyterHub.authenticator_class
    assert c.NativeAuthenticator.open_signup is False
    assert c.NativeAuthenticator.minimum_password_length >= 8
    assert c.Authenticator.admin_users, "nobody could approve the students"


def _z2jh(values):
    config = values["hub"]["config"]
    assert config["JupyterHub"]["authenticator_class"] == NATIVE, config["JupyterHub"]
    assert config["NativeAuthenticator"]["open_signup"] is False
    assert config["Authenticator"]["admin_users"], "nobody could approve the students"
    assert values["proxy"]["https"]["enabled"] is True, "the public proxy must use TLS"


def _tljh(readme: str):
    commands = re.findall(r"sudo tljh-config set auth\.type (\S+)", readme)
    assert commands == [NATIVE], f"TLJH auth.type commands: {commands}"


def _image(dockerfile: str):
    (cmd,) = re.findall(r"^CMD\s+(.+)$", dockerfile, re.MULTILINE)
    assert cmd.strip() == '["jupyterhub-singleuser"]', cmd
    assert not re.search(r"jupyter(?:-|\s+)(?:lab|notebook|server)\b", cmd), cmd


def _harness_config():
    import sys

    sys.path.insert(0, str(DEPLOY))
    try:
        from local_hub import hub_config
    finally:
        sys.path.remove(str(DEPLOY))
    ports = {"public": 9001, "hub": 9002, "proxy_api": 9003}
    return hub_config(Path("/tmp/hub"), ["student1"], "x" * 24, {}, ports)


def _harness_is_locked_down(config):
    from urllib.parse import urlsplit

    for url in (config["JupyterHub"]["bind_url"], config["JupyterHub"]["hub_bind_url"],
                config["ConfigurableHTTPProxy"]["api_url"]):
        assert urlsplit(url).hostname == "127.0.0.1", url
    assert config["Spawner"]["ip"] == "127.0.0.1"
    assert config["Authenticator"]["allowed_users"] == ["student1"]
    assert config["SharedPasswordAuthenticator"]["user_password"] == "x" * 24


def _harness_importers(importers):
    assert set(importers) <= {"deploy/measure_hub.py"}, importers


def _who_imports_the_harness():
    return [name for name in tracked_files() if name.endswith(".py")
            and re.search(r"^\s*(?:from|import)\s+local_hub\b",
                          (ROOT / name).read_text(encoding="utf-8"), re.MULTILINE)]


def _random_password(source: str):
    assert "secrets.token_urlsafe(" in source, "the harness password must be random"


def cases() -> list[Case]:
    c = []

    def accept(name, call, check):
        c.append(Case(SURFACE, name, call, None, check=check, seconds=20.0))

    accept("weak-authenticators-only-in-the-harness", lambda: _scan(WEAK_AUTH), _only_in_harness)
    accept("no-server-opened-without-auth", lambda: _scan(OPEN_SERVER), _none)
    accept("one-server-config-native-with-approval", _one_server_config, _native_with_approval)
    accept("z2jh-values-native-with-approval", lambda: yaml.safe_load(
        (DEPLOY / "z2jh" / "values.yaml").read_text(encoding="utf-8")), _z2jh)
    accept("tljh-commands-native", lambda: (DEPLOY / "README.md").read_text(encoding="utf-8"),
           _tljh)
    accept("image-starts-the-hub-authenticated-server",
           lambda: (DEPLOY / "Dockerfile").read_text(encoding="utf-8"), _image)
    accept("harness-loopback-password-allowed-users", _harness_config, _harness_is_locked_down)
    accept("harness-password-is-random",
           lambda: (DEPLOY / "local_hub.py").read_text(encoding="utf-8"), _random_password)
    accept("harness-imported-only-by-the-measurement", _who_imports_the_harness,
           _harness_importers)
    return c
