"""Surface 11: the classroom deployment in ``deploy/``. Nothing shipped opens a hub or a server
without authentication: every shipped hub configuration (the one-server config, the Zero to
JupyterHub values, the TLJH commands of deploy/README.md) names NativeAuthenticator with the
teacher's approval; the image starts the hub-authenticated single-user server; no shipped file
turns a token or password off or listens on every interface. A weak authenticator (dummy, null,
shared password) appears only in the local test harness (``deploy/local_hub.py``), which only the
measurement script and the tests import, and which listens on 127.0.0.1 behind a random
password for a fixed list of students.

The hub's admin is each class's own name (``GRPO_LAB_ADMIN``, no default) and holds the admin role
without being pre-approved on sign-up (NativeAuthenticator approves ``Authenticator.admin_users``
when they sign up, so a stranger signing up first under a known admin name would become admin);
the measurement refuses a cell timeout that is not a finite positive number of seconds before it
starts anything; the nbgitpuller link refuses credentials in its URLs without echoing them."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
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
#: The admin name the cases give the shipped configs (each class sets its own).
ADMIN = "fuzz-admin"
#: A secret the nbgitpuller cases put in a URL: it must reach neither the link nor the error.
SECRET = "ghp_fuzzSecret123"


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


@contextlib.contextmanager
def admin_variable(name: str | None):
    """GRPO_LAB_ADMIN, the shipped configs' required admin name, set to ``name`` (None: unset)
    for the block (tests/test_hub.py uses it too)."""
    saved = os.environ.pop("GRPO_LAB_ADMIN", None)
    if name is not None:
        os.environ["GRPO_LAB_ADMIN"] = name
    try:
        yield
    finally:
        os.environ.pop("GRPO_LAB_ADMIN", None)
        if saved is not None:
            os.environ["GRPO_LAB_ADMIN"] = saved


def _one_server_config(admin=ADMIN):
    from traitlets.config.loader import PyFileConfigLoader

    with admin_variable(admin):
        return PyFileConfigLoader("jupyterhub_config.py", path=str(DEPLOY)).load_config()


def _admins_by_role(load_roles) -> list:
    return [user for role in load_roles if role["name"] == "admin" for user in role["users"]]


def _native_with_approval(c):
    assert c.JupyterHub.authenticator_class == NATIVE, c.JupyterHub.authenticator_class
    assert c.NativeAuthenticator.open_signup is False
    assert c.NativeAuthenticator.minimum_password_length >= 8
    assert _admins_by_role(c.JupyterHub.load_roles) == [ADMIN], "nobody could approve students"


def _admin_not_pre_approved(c):
    # NativeAuthenticator approves every name in Authenticator.admin_users on sign-up
    assert not c.Authenticator.get("admin_users"), c.Authenticator.admin_users
    assert _admins_by_role(c.JupyterHub.load_roles) == [ADMIN], c.JupyterHub.load_roles


def _z2jh_values():
    return yaml.safe_load((DEPLOY / "z2jh" / "values.yaml").read_text(encoding="utf-8"))


def _z2jh_config(admin=ADMIN):
    """The hub config the chart's values make: their ``hub.config`` and ``hub.extraConfig``
    snippets run in order on it, as the chart's hub does."""
    from traitlets.config import Config

    values = _z2jh_values()
    c = Config(values["hub"]["config"])
    c.JupyterHub.load_roles = []
    with admin_variable(admin):
        for _, snippet in sorted(values["hub"].get("extraConfig", {}).items()):
            exec(compile(snippet, "values.yaml:hub.extraConfig", "exec"), {"c": c})  # noqa: S102
    return c


def _z2jh(values):
    config = values["hub"]["config"]
    assert config["JupyterHub"]["authenticator_class"] == NATIVE, config["JupyterHub"]
    assert config["NativeAuthenticator"]["open_signup"] is False
    assert values["proxy"]["https"]["enabled"] is True, "the public proxy must use TLS"


def _measure_main(*args):
    """``measure_hub.main`` with ``measure`` replaced: a refusal must come before anything
    starts, so reaching ``measure`` is the silent outcome."""
    sys.path.insert(0, str(DEPLOY))
    try:
        import measure_hub
    finally:
        sys.path.remove(str(DEPLOY))

    def call():
        real, err = measure_hub.measure, io.StringIO()
        measure_hub.measure = lambda *a, **k: "the measurement started"
        try:
            with contextlib.redirect_stderr(err):
                return measure_hub.main(["--students", "1", *args])
        except SystemExit as stop:
            raise ValueError(err.getvalue().strip().splitlines()[-1]) from stop
        finally:
            measure_hub.measure = real
    return call


def _link(**kwargs):
    """``nbgitpuller_link`` on a hostile URL; an error that echoes SECRET is a crash."""
    sys.path.insert(0, str(DEPLOY))
    try:
        from nbgitpuller_link import nbgitpuller_link
    finally:
        sys.path.remove(str(DEPLOY))
    args = {"hub": "https://hub.example.org", "repo": "https://github.com/example/grpo-lab",
            "branch": "main", "notebook": "notebooks/00_tour.ipynb", **kwargs}

    def call():
        try:
            return nbgitpuller_link(**args)
        except ValueError as error:
            if SECRET in str(error):
                raise RuntimeError(f"the error echoes the secret: {error}") from None
            raise
    return call


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
    accept("z2jh-values-native-with-approval", _z2jh_values, _z2jh)
    accept("tljh-commands-native", lambda: (DEPLOY / "README.md").read_text(encoding="utf-8"),
           _tljh)
    accept("image-starts-the-hub-authenticated-server",
           lambda: (DEPLOY / "Dockerfile").read_text(encoding="utf-8"), _image)
    accept("harness-loopback-password-allowed-users", _harness_config, _harness_is_locked_down)
    accept("harness-password-is-random",
           lambda: (DEPLOY / "local_hub.py").read_text(encoding="utf-8"), _random_password)
    accept("harness-imported-only-by-the-measurement", _who_imports_the_harness,
           _harness_importers)
    accept("one-server-admin-by-role-not-pre-approved", _one_server_config,
           _admin_not_pre_approved)
    accept("z2jh-admin-by-role-not-pre-approved", _z2jh_config, _admin_not_pre_approved)

    def refuse(name, call, *fragments):
        c.append(Case(SURFACE, name, call, tuple(fragments), seconds=20.0))

    refuse("one-server-admin-name-unset", lambda: _one_server_config(None), "GRPO_LAB_ADMIN")
    refuse("one-server-admin-name-empty", lambda: _one_server_config(" "), "GRPO_LAB_ADMIN")
    refuse("one-server-admin-name-with-a-space", lambda: _one_server_config("the teacher"),
           "GRPO_LAB_ADMIN", "'the teacher'")
    refuse("z2jh-admin-name-unset", lambda: _z2jh_config(None), "GRPO_LAB_ADMIN")
    for value in ("nan", "inf", "-inf", "0", "-5", "1e999", "ten"):
        refuse(f"measure-cell-timeout-{value}", _measure_main(f"--cell-timeout={value}"),
               "--cell-timeout", repr(value))
    for value in ("0", "nan", "2.5", "65"):
        refuse(f"measure-students-{value}", _measure_main(f"--students={value}"), "--students",
               repr(value))
    for value in ("0", "1e3", "nan"):
        refuse(f"measure-steps-{value}", _measure_main(f"--steps={value}"), "--steps",
               repr(value))
    refuse("link-repo-password", _link(repo=f"https://me:{SECRET}@github.com/example/grpo-lab"),
           "repo", "credentials")
    refuse("link-repo-token-as-user", _link(repo=f"https://{SECRET}@github.com/example/lab"),
           "repo", "credentials")
    refuse("link-repo-access-token-query",
           _link(repo=f"https://github.com/example/grpo-lab?access_token={SECRET}"), "repo",
           "credentials")
    refuse("link-repo-token-fragment", _link(repo=f"https://github.com/example/lab#token={SECRET}"),
           "repo")
    refuse("link-hub-password", _link(hub=f"https://teacher:{SECRET}@hub.example.org"), "hub",
           "credentials")
    refuse("link-hub-token-query", _link(hub=f"https://hub.example.org/?token={SECRET}"), "hub",
           "credentials")
    return c
