"""The classroom deployment in deploy/: shipped configs, the Binder and image files, the link helper,
the admin's setup, and real JupyterHubs on 127.0.0.1: a sign-up under the admin's name, and (slow)
three students training at the same time.

The fast tests read the shipped files: the one-server JupyterHub config (loaded with traitlets'
config loader, and every setting checked against the trait it sets where JupyterHub,
NativeAuthenticator and SystemdSpawner are installed), the Zero to JupyterHub values (same sizes,
threads and culling as the one-server config; the admin a required name, by role), the Dockerfile
and ``.binder/`` (the CPU build of torch, pinned to the lock's version when the lock exists), the
nbgitpuller link helper (no credentials in the link) and the measurement's command line.

Two hubs with the shipped config's NativeAuthenticator settings: without the teacher's setup a
stranger's sign-up under the admin's name cannot log in; after ``deploy/hub_admin.py`` the name
is taken and the teacher approves a student. The slow test runs ``deploy/measure_hub.py
--students 3 --steps 2``: a throwaway hub and proxy, three students logged in through the login
form, their servers started through the hub, and each running notebook 00's setup cells and a
2-step version of notebook 02's live GRPO run over the kernel websocket, all at once. The hub
tests skip, saying why, where jupyterhub, nativeauthenticator or configurable-http-proxy is
missing (``pip install -e '.[hub]'``; ``npm install -g configurable-http-proxy``; .ci/run installs
both) or on Windows.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import math
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psutil
import pytest
import requests
import yaml
from traitlets import HasTraits
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
LOCK = ROOT / "requirements-lock.txt"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
LOOPBACK = "127.0.0.1"
ADMIN = "lab-admin"  # the admin name the tests give the shipped configs (GRPO_LAB_ADMIN)
UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
# where each section of the shipped config lives, to check its settings against the real traits
CONFIG_CLASSES = {
    "JupyterHub": "jupyterhub.app", "ConfigurableHTTPProxy": "jupyterhub.proxy",
    "Authenticator": "jupyterhub.auth", "Spawner": "jupyterhub.spawner",
    "NativeAuthenticator": "nativeauthenticator", "SystemdSpawner": "systemdspawner",
}

sys.path.insert(0, str(DEPLOY))
from fuzz.deploy import admin_variable
from hub_student import HubStudent
from local_hub import LocalHub, hub_config
from nbgitpuller_link import nbgitpuller_link
from notebook_pieces import grpo_pieces, tour_setup


def shipped_config(admin: str | None = ADMIN):
    with admin_variable(admin):
        return PyFileConfigLoader("jupyterhub_config.py", path=str(DEPLOY)).load_config()


def admins(c) -> set[str]:
    """Everyone the config makes admin: by Authenticator.admin_users or the admin role."""
    return set(c.Authenticator.get("admin_users", ())) | {
        user for role in c.JupyterHub.get("load_roles", ()) if role["name"] == "admin"
        for user in role.get("users", ())}


def values():
    return yaml.safe_load((DEPLOY / "z2jh" / "values.yaml").read_text())


def z2jh_config(admin: str | None = ADMIN):
    """The hub config the chart builds from the values: ``hub.config``, then the
    ``hub.extraConfig`` snippets in order, run as the chart's hub runs them."""
    v = values()
    c = Config(copy.deepcopy(v["hub"]["config"]))
    c.JupyterHub.load_roles = []
    with admin_variable(admin):
        for _, snippet in sorted(v["hub"].get("extraConfig", {}).items()):
            exec(compile(snippet, "values.yaml:hub.extraConfig", "exec"), {"c": c})  # noqa: S102
    return c


def to_bytes(size) -> int:
    """'2G' (JupyterHub's and Kubernetes' decimal-letter sizes, read as powers of 1024) in bytes."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT])i?", str(size))
    assert match, f"not a size: {size!r}"
    return int(float(match.group(1)) * UNITS[match.group(2)])


def lock_version(name: str) -> str | None:
    """The lock's pinned version of ``name``; None while the lock does not exist yet."""
    if not LOCK.exists():
        return None
    for line in LOCK.read_text().splitlines():
        requirement = line.split("#", 1)[0].split(";", 1)[0].strip()
        if requirement.lower().startswith(f"{name}=="):
            return requirement.split("==", 1)[1].strip()
    raise AssertionError(f"{LOCK.name} does not pin {name}")


# -- the one-server config -------------------------------------------------------------------

def test_shipped_config_authenticates_for_real_and_waits_for_approval():
    c = shipped_config()
    authenticator = c.JupyterHub.authenticator_class
    assert authenticator == "nativeauthenticator.NativeAuthenticator"
    assert not re.search(r"dummy|null|shared|tmp", authenticator, re.IGNORECASE)
    assert c.NativeAuthenticator.open_signup is False  # nobody in until the teacher approves
    assert c.NativeAuthenticator.minimum_password_length >= 8
    assert admins(c) == {ADMIN}, "someone must be able to approve sign-ups"


@pytest.mark.parametrize("config", [shipped_config, z2jh_config])
def test_the_admin_is_a_required_name_held_by_role_not_pre_approved(config):
    # NativeAuthenticator approves Authenticator.admin_users on sign-up: with a fixed, public
    # name the first visitor to sign up as "teacher" became admin
    c = config()
    assert not c.Authenticator.get("admin_users"), c.Authenticator.admin_users
    assert [role["users"] for role in c.JupyterHub.load_roles if role["name"] == "admin"] == \
        [[ADMIN]]
    for wrong in (None, "", "The Teacher", "a/b", "x" * 65):
        with pytest.raises(ValueError, match=rf"^GRPO_LAB_ADMIN: expected .*, got "
                                             rf"{re.escape(repr(wrong or ''))}"):
            config(wrong)


def test_shipped_config_limits_each_student_with_a_spawner_that_enforces_them():
    c = shipped_config()
    assert c.JupyterHub.spawner_class == "systemdspawner.SystemdSpawner"
    assert 0 < c.Spawner.cpu_limit <= 4
    assert 2**30 <= to_bytes(c.Spawner.mem_limit) <= 16 * 2**30
    threads = str(math.ceil(c.Spawner.cpu_limit))  # whole CPUs, rounded up
    for name in ("LABKIT_THREADS", "OMP_NUM_THREADS"):
        assert c.Spawner.environment[name] == threads, f"{name} must equal the CPU limit"
    assert c.Spawner.cmd[0].endswith("/bin/jupyterhub-singleuser")  # the lab's environment


def test_shipped_config_binds_only_the_loopback_interface():
    c = shipped_config()
    for url in (c.JupyterHub.bind_url, c.JupyterHub.hub_bind_url,
                c.ConfigurableHTTPProxy.api_url):
        assert urlsplit(url).hostname == LOOPBACK, url
    assert c.Spawner.ip == LOOPBACK


def test_shipped_config_culls_idle_servers_with_least_privilege():
    c = shipped_config()
    (service,) = c.JupyterHub.services
    assert service["command"][1:3] == ["-m", "jupyterhub_idle_culler"]
    assert culler_timeout(c) > 0
    (role,) = [role for role in c.JupyterHub.load_roles if role["name"] != "admin"]
    assert role["services"] == [service["name"]]
    assert not any(scope.startswith("admin") for scope in role["scopes"])
    assert any("cull_idle_timeout" in arg for arg in c.Spawner.args)


def culler_timeout(c) -> int:
    (service,) = c.JupyterHub.services
    (timeout,) = [arg.split("=", 1)[1] for arg in service["command"] if
                  arg.startswith("--timeout=")]
    return int(timeout)


def test_shipped_config_names_only_real_settings():
    """Each setting exists on its class and takes its value (a typo would be silently ignored)."""
    c = shipped_config()
    # every module the check imports: the sections' classes, and the classes the *_class
    # settings name (checking authenticator_class imports nativeauthenticator)
    modules = {CONFIG_CLASSES[section].split(".")[0] for section in c} | {
        value.split(".")[0] for settings in c.values() for name, value in settings.items()
        if name.endswith("_class") and isinstance(value, str) and "." in value}
    missing = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    if missing:  # e.g. jupyterhub alone, as a teacher might install it
        pytest.skip(f"{', '.join(missing)} not installed (pip install -e '.[hub]')")
    for section, settings in c.items():
        module = importlib.import_module(CONFIG_CLASSES[section])
        traits = getattr(module, section).class_traits(config=True)
        for name, value in settings.items():
            assert name in traits, f"{section}.{name} is not a setting of {section}"
            probe = type("Probe", (HasTraits,), {name: copy.deepcopy(traits[name])})()
            setattr(probe, name, value)  # raises TraitError on a value the trait refuses
    from jupyterhub.scopes import scope_definitions

    for role in c.JupyterHub.load_roles:
        assert set(role.get("scopes", ())) <= set(scope_definitions), role["scopes"]


def test_measurement_hub_config_is_test_only_and_loopback_only(tmp_path):
    config = hub_config(tmp_path, ["student1"], "a-password", {"LABKIT_THREADS": "1"},
                        {"public": 9001, "hub": 9002, "proxy_api": 9003})
    for url in (config["JupyterHub"]["bind_url"], config["JupyterHub"]["hub_bind_url"],
                config["ConfigurableHTTPProxy"]["api_url"]):
        assert urlsplit(url).hostname == LOOPBACK, url
    assert config["Spawner"]["ip"] == LOOPBACK
    assert config["Authenticator"]["allowed_users"] == ["student1"]
    assert config["Spawner"]["environment"] == {"LABKIT_THREADS": "1"}
    shipped = shipped_config().JupyterHub.authenticator_class
    assert config["JupyterHub"]["authenticator_class"] != shipped


# -- Zero to JupyterHub, the image, Binder ----------------------------------------------------

def test_z2jh_values_match_the_one_server_sizes_threads_and_culling():
    c, v = shipped_config(), values()
    single = v["singleuser"]
    assert single["cpu"]["limit"] == c.Spawner.cpu_limit
    assert 0 < single["cpu"]["guarantee"] <= single["cpu"]["limit"]
    assert to_bytes(single["memory"]["limit"]) == to_bytes(c.Spawner.mem_limit)
    assert 0 < to_bytes(single["memory"]["guarantee"]) <= to_bytes(single["memory"]["limit"])
    assert single["extraEnv"] == c.Spawner.environment
    assert v["cull"]["enabled"] is True and v["cull"]["timeout"] == culler_timeout(c)
    assert v["hub"]["config"]["JupyterHub"]["authenticator_class"] == \
        c.JupyterHub.authenticator_class
    assert v["hub"]["config"]["NativeAuthenticator"]["open_signup"] is False
    assert single["image"]["name"] and single["image"]["tag"]
    kernels = single["extraFiles"]["kernel-culling"]["data"]["MappingKernelManager"]
    assert kernels["cull_idle_timeout"] > 0


def test_dockerfile_installs_the_cpu_torch_first_then_the_locked_lab():
    text = (DEPLOY / "Dockerfile").read_text()
    torch = re.search(r'pip install "torch==\$\{TORCH_VERSION\}" --index-url (\S+)', text)
    lab = re.search(r"pip install -c requirements-lock\.txt -e \.", text)
    assert torch and torch.group(1) == CPU_INDEX
    assert lab and torch.start() < lab.start()
    pinned = re.search(r"^ARG TORCH_VERSION=(\S+)$", text, re.MULTILINE).group(1)
    hub = re.search(r"^ARG JUPYTERHUB_VERSION=(\S+)$", text, re.MULTILINE).group(1)
    if lock_version("torch") is not None:
        assert pinned == lock_version("torch").split("+")[0]
        # the image installs under the lock: another jupyterhub than the lock's cannot install
        assert hub == lock_version("jupyterhub")


def test_binder_installs_a_pinned_cpu_torch_and_the_lab_under_the_lock():
    binder = ROOT / ".binder"
    lines = [line.strip() for line in (binder / "requirements.txt").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert any(re.fullmatch(rf"--(extra-)?index-url\s+{re.escape(CPU_INDEX)}", line)
               for line in lines)
    (torch,) = [line for line in lines if line.startswith("torch")]
    pinned = re.fullmatch(r"torch==(\d+\.\d+\.\d+)\+cpu", torch)
    assert pinned, f"torch must be pinned to a +cpu build, got {torch!r}"
    constraints = [line.split(None, 1)[1] for line in lines if line.startswith("-c ")]
    assert [(binder / path).resolve() for path in constraints] == [LOCK.resolve()]
    assert "-e ." in lines or "." in lines
    if lock_version("torch") is not None:
        assert pinned.group(1) == lock_version("torch").split("+")[0]
    assert re.fullmatch(r"python-3\.1\d", (binder / "runtime.txt").read_text().strip())


# -- the nbgitpuller link ---------------------------------------------------------------------

def test_nbgitpuller_link_encodes_every_value_and_names_the_clone_folder():
    link = nbgitpuller_link("https://hub.example.org/", "https://github.com/example/grpo-lab.git",
                            "main", "notebooks/02_grpo.ipynb")
    parts = urlsplit(link)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == \
        "https://hub.example.org/hub/user-redirect/git-pull"
    assert "/" not in parts.query and ":" not in parts.query  # encoded whole
    query = {key: value for key, (value,) in parse_qs(parts.query, strict_parsing=True).items()}
    assert query == {"repo": "https://github.com/example/grpo-lab.git", "branch": "main",
                     "targetpath": "grpo-lab",
                     "urlpath": "lab/tree/grpo-lab/notebooks/02_grpo.ipynb"}


def test_nbgitpuller_link_keeps_a_hub_prefix_and_the_classic_interface():
    link = nbgitpuller_link("https://uni.example.org/jhub", "https://gitlab.example.org/a/lab",
                            "week-2", "notebooks/00_tour.ipynb", interface="notebook")
    assert link.startswith("https://uni.example.org/jhub/hub/user-redirect/git-pull?")
    assert parse_qs(urlsplit(link).query)["urlpath"] == ["tree/lab/notebooks/00_tour.ipynb"]


@pytest.mark.parametrize(("field", "kwargs"), [
    ("hub", {"hub": "hub.example.org"}),
    ("repo", {"repo": "ftp://example.org/lab"}),
    ("branch", {"branch": "two words"}),
    ("notebook", {"notebook": "../secrets.ipynb"}),
    ("notebook", {"notebook": "/etc/passwd"}),
    ("interface", {"interface": "vscode"}),
])
def test_nbgitpuller_link_refuses_bad_input_naming_the_field(field, kwargs):
    args = {"hub": "https://hub.example.org", "repo": "https://github.com/example/grpo-lab",
            "branch": "main", "notebook": "notebooks/00_tour.ipynb", **kwargs}
    with pytest.raises(ValueError, match=rf"^{field}: .*{re.escape(repr(kwargs[field]))}"):
        nbgitpuller_link(**args)


SECRET = "ghp_notARealToken123"


@pytest.mark.parametrize(("field", "url"), [
    ("repo", f"https://teacher:{SECRET}@github.com/example/grpo-lab"),
    ("repo", f"https://{SECRET}@github.com/example/grpo-lab"),
    ("repo", f"https://oauth2:{SECRET}@gitlab.example.org/a/lab.git"),
    ("repo", f"https://github.com/example/grpo-lab?access_token={SECRET}"),
    ("repo", f"https://github.com/example/grpo-lab.git?private=1&token={SECRET}"),
    ("repo", f"git+https://me:{SECRET}@github.com/example/grpo-lab"),
    ("hub", f"https://admin:{SECRET}@hub.example.org"),
    ("hub", f"https://hub.example.org/?token={SECRET}"),
    ("hub", f"https://hub.example.org/#token={SECRET}"),
])
def test_nbgitpuller_link_refuses_credentials_without_repeating_them(field, url):
    args = {"hub": "https://hub.example.org", "repo": "https://github.com/example/grpo-lab",
            "branch": "main", "notebook": "notebooks/00_tour.ipynb", field: url}
    with pytest.raises(ValueError, match=rf"^{field}: ") as refused:
        nbgitpuller_link(**args)
    message = str(refused.value)
    assert "credentials" in message and SECRET not in message and "***" in message
    run = subprocess.run([sys.executable, str(DEPLOY / "nbgitpuller_link.py"),
                          "--hub", args["hub"], "--repo", args["repo"]],
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2 and not run.stdout and f"{field}: " in run.stderr
    assert SECRET not in run.stderr


def test_nbgitpuller_link_command_prints_the_link():
    out = subprocess.run([sys.executable, str(DEPLOY / "nbgitpuller_link.py"),
                          "--hub", "https://hub.example.org",
                          "--repo", "https://github.com/example/grpo-lab"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == nbgitpuller_link("https://hub.example.org",
                                           "https://github.com/example/grpo-lab", "main",
                                           "notebooks/00_tour.ipynb")


# -- the cells the measurement runs -----------------------------------------------------------

def test_measured_cells_are_the_setup_the_live_run_and_its_assertion():
    tour = tour_setup(ROOT / "notebooks" / "00_tour.ipynb")
    assert "load_policy(" in tour[-1][1]
    assert not any("load_policy(" in source for _, source in tour[:-1])
    pieces = grpo_pieces(ROOT / "notebooks" / "02_grpo.ipynb", steps=2)
    assert "set_num_threads" in pieces["setup"][1]
    assert re.search(r"^result = train\(", pieces["run"][1], re.MULTILINE)
    assert re.search(r"^STEPS = 2$", pieces["run"][1], re.MULTILINE)
    assert pieces["run"][0] < pieces["check"][0]
    assert "assert" in pieces["check"][1] and "result." in pieces["check"][1]
    as_shipped = grpo_pieces(ROOT / "notebooks" / "02_grpo.ipynb")["run"][1]
    assert as_shipped.replace(re.search(r"^STEPS = \d+$", as_shipped, re.MULTILINE).group(0),
                              "STEPS = 2") == pieces["run"][1]


def test_measured_cells_refuse_a_notebook_without_a_live_run(tmp_path):
    import nbformat

    path = tmp_path / "02_grpo.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import torch"), nbformat.v4.new_code_cell("x = 1")]
    nbformat.write(nb, path)
    with pytest.raises(ValueError, match="result = train"):
        grpo_pieces(path)
    with pytest.raises(ValueError, match="steps: expected a positive integer"):
        grpo_pieces(ROOT / "notebooks" / "02_grpo.ipynb", steps=0)


# -- the measurement's command line ------------------------------------------------------------

@pytest.mark.parametrize(("flag", "value", "allowed"), [
    *[("--cell-timeout", v, "a number of seconds above 0 and at most 86400")
      for v in ("nan", "inf", "-inf", "0", "-5", "1e999", "86401", "ten")],
    *[("--students", v, "an integer from 1 to 64") for v in ("0", "65", "2.5", "nan")],
    *[("--steps", v, "an integer from 1 to 1000") for v in ("0", "1001", "1e3", "inf")],
])
def test_measurement_refuses_bad_numbers_before_anything_starts(flag, value, allowed,
                                                                monkeypatch, capsys):
    import measure_hub

    started = []
    monkeypatch.setattr(measure_hub, "measure", lambda *args: started.append(args))
    argv = ["--students", "1", f"{flag}={value}"]
    with pytest.raises(SystemExit) as stop:
        measure_hub.main(argv)
    assert stop.value.code == 2 and not started
    assert f"{flag}: expected {allowed}, got {value!r}" in capsys.readouterr().err


# -- a real hub: a sign-up under the admin's name --------------------------------------------------

def hub_missing() -> str | None:
    if sys.platform == "win32":
        return "JupyterHub does not run on Windows"
    try:
        import jupyterhub  # noqa: F401
    except ImportError:
        return "jupyterhub is not installed (pip install -e '.[hub]')"
    if shutil.which("configurable-http-proxy") is None:
        return "configurable-http-proxy is not on PATH (npm install -g configurable-http-proxy)"
    return None


def native_missing() -> str | None:
    if importlib.util.find_spec("nativeauthenticator") is None:
        return "nativeauthenticator is not installed (pip install -e '.[hub]')"
    return hub_missing()


def shipped_authentication() -> dict:
    """The shipped config's authentication (and its admin), for a throwaway hub."""
    c = shipped_config()
    as_json = {name: sorted(value) if isinstance(value, set) else value
               for name, value in c.Authenticator.items()}
    return {"JupyterHub": {"authenticator_class": c.JupyterHub.authenticator_class,
                           "load_roles": [r for r in c.JupyterHub.get("load_roles", ())
                                          if r["name"] == "admin"]},
            "Authenticator": as_json, "NativeAuthenticator": dict(c.NativeAuthenticator)}


def sign_up(hub_url: str, name: str, password: str) -> str:
    """Post the hub's sign-up form as a browser does; the page's text."""
    http = requests.Session()
    http.get(f"{hub_url}/hub/signup", timeout=30).raise_for_status()
    reply = http.post(f"{hub_url}/hub/signup", timeout=30, data={
        "username": name, "signup_password": password, "signup_password_confirmation": password,
        "_xsrf": http.cookies.get("_xsrf", "")})
    reply.raise_for_status()
    return reply.text


def run_hub_admin(password: str):
    """deploy/hub_admin.py on the throwaway hub's config before it starts, as a teacher's setup."""
    def setup(config_path: Path) -> None:
        run = subprocess.run([sys.executable, str(DEPLOY / "hub_admin.py"), "-f", str(config_path),
                              "--password-stdin"], input=password + "\n", capture_output=True,
                             text=True, timeout=120, cwd=config_path.parent, check=False)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == f"{ADMIN}: account created and approved", run.stdout
    return setup


@pytest.mark.skipif(importlib.util.find_spec("nativeauthenticator") is None,
                    reason="nativeauthenticator is not installed (pip install -e '.[hub]')")
def test_hub_admin_approves_the_admin_once_and_replaces_a_strangers_sign_up(tmp_path):
    import bcrypt
    import hub_admin
    from jupyterhub import orm
    from nativeauthenticator.orm import UserInfo

    url = f"sqlite:///{(tmp_path / 'jupyterhub.sqlite').as_posix()}"
    config = Config({"JupyterHub": {"db_url": url, "load_roles": [{"name": "admin",
                                                                   "users": [ADMIN]}]},
                     "NativeAuthenticator": {"minimum_password_length": 10,
                                             "check_common_password": True}})
    with pytest.raises(ValueError, match="^password: expected at least 10 characters and not a "
                                         "common one$"):
        hub_admin.create_admin(config, "password1")
    db = orm.new_session_factory(url)()
    try:  # someone signed up under the admin's name, with 2FA, before the setup ran
        db.add(UserInfo(username=ADMIN, password=bcrypt.hashpw(b"strangers-pass", bcrypt.gensalt()),
                        email="x@example.org", has_2fa=True))
        db.commit()
        assert "replaced an unapproved sign-up" in hub_admin.create_admin(config, "teachers-pass")
        db.expire_all()
        (info,) = UserInfo.all_users(db)
        assert info.is_authorized and not info.has_2fa and info.email is None
        assert info.is_valid_password("teachers-pass") and not info.is_valid_password(
            "strangers-pass")
        assert hub_admin.create_admin(config, "other-password") == \
            f"{ADMIN}: the account exists and is approved; nothing changed"
        db.expire_all()
        assert UserInfo.find(db, ADMIN).is_valid_password("teachers-pass")
    finally:
        db.close()
    config.Authenticator.admin_users = {ADMIN}
    with pytest.raises(ValueError, match=r"^Authenticator\.admin_users: expected none"):
        hub_admin.create_admin(config, "teachers-pass")


@pytest.mark.skipif(native_missing() is not None, reason=str(native_missing()))
def test_a_sign_up_under_the_admin_name_before_the_setup_gets_nothing():
    """Without the teacher's setup, a stranger signs up under the admin's name first: the
    account waits for an approval, so it cannot log in or reach anything."""
    auth = shipped_authentication()
    (admin,) = admins(shipped_config())
    stranger = HubStudent("", admin, secrets.token_urlsafe(16))
    with LocalHub(["student1"], ROOT / "notebooks", {}, auth=auth) as hub:
        stranger.hub_url = hub.url
        sign_up(hub.url, admin, stranger.password)
        with pytest.raises(PermissionError):
            stranger.log_in()
        reply = stranger.http.get(f"{hub.url}/hub/authorize", timeout=30, allow_redirects=False)
        assert reply.status_code != 200  # the approvals page is the admin's
        assert requests.get(f"{hub.url}/hub/api/users", timeout=30).status_code == 403


@pytest.mark.skipif(native_missing() is not None, reason=str(native_missing()))
def test_after_the_setup_the_admin_name_is_taken_and_the_teacher_approves_students():
    teacher = HubStudent("", ADMIN, secrets.token_urlsafe(16))
    stranger = HubStudent("", ADMIN, secrets.token_urlsafe(16))
    student = HubStudent("", "student1", secrets.token_urlsafe(16))
    with LocalHub(["student1"], ROOT / "notebooks", {}, auth=shipped_authentication(),
                  before_start=run_hub_admin(teacher.password)) as hub:
        for person in (teacher, stranger, student):
            person.hub_url = hub.url
        assert "already in use" in sign_up(hub.url, ADMIN, stranger.password)
        with pytest.raises(PermissionError):
            stranger.log_in()
        assert "sent to the admin" in sign_up(hub.url, student.name, student.password)
        with pytest.raises(PermissionError):
            student.log_in()  # waits for the teacher
        teacher.log_in()
        pending = teacher.http.get(f"{hub.url}/hub/authorize", timeout=30)
        assert pending.status_code == 200 and student.name in pending.text
        teacher.http.get(f"{hub.url}/hub/authorize/{student.name}", timeout=30).raise_for_status()
        student.log_in()


# -- a real hub, three students at once ---------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(hub_missing() is not None, reason=str(hub_missing()))
def test_three_students_train_at_once_through_a_real_hub(tmp_path):
    record_path = tmp_path / "hub.json"
    run = subprocess.run(
        [sys.executable, str(DEPLOY / "measure_hub.py"), "--students", "3", "--steps", "2",
         "--cell-timeout", "900", "--json", str(record_path)],
        capture_output=True, text=True, timeout=1800, cwd=tmp_path, check=False)
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    report = json.loads(record_path.read_text())
    assert report["wrong_password_refused"] is True
    students = report["per_student"]
    assert [s["student"] for s in students] == ["student1", "student2", "student3"]
    for s in students:
        assert s["completed"] is True, s
        assert s["steps"] == 2 and s["eval_steps"] == [0, 2], s
        assert 0 <= s["accuracy_before"] <= 1 and 0 <= s["accuracy_after"] <= 1
        assert s["torch_threads"] == 1 and s["LABKIT_THREADS"] == "1", s
        assert s["tour_torch_threads"] == 1, s  # set by the environment alone
        assert s["OMP_NUM_THREADS"] == "1"
        assert 0 < s["run_wall_s"] < 900 and s["run_cpu_s"] > 0.5
        # one compute thread: the kernel cannot use much more CPU time than wall time
        assert s["run_cpu_s"] <= 1.25 * s["run_wall_s"] + 2, s
        assert 150 < s["peak_rss_02_mib"] < 4096, s  # torch + transformers + the tiny model
        assert 150 < s["peak_rss_00_mib"] < 4096, s
        assert 20 < s["peak_rss_server_mib"] < 1024, s
        assert s["peak_rss_tree_mib"] >= max(s["peak_rss_02_mib"], s["peak_rss_00_mib"]), s
    # everything was cleaned up: the temporary folder is gone and nothing runs from it
    workdir = report["workdir"]
    assert not Path(workdir).exists()
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        cwd, cmdline = proc.info["cwd"] or "", " ".join(proc.info["cmdline"] or [])
        assert workdir not in cwd and workdir not in cmdline, proc
    assert "| student1 |" in run.stdout
