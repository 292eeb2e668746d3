"""The setup files agree: environment.yml installs what pyproject.toml declares, and CI runs the
README's own commands."""

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ]", requirement.strip(), maxsplit=1)[0].lower()


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r): r.replace(" ", "") for r in project["dependencies"]}
    wanted.update({_name(r): r.replace(" ", "") for r in project["optional-dependencies"]["dev"]})
    pip_lines = [ln.strip()[2:].strip() for ln in (ROOT / "environment.yml").read_text().splitlines()
                 if ln.strip().startswith("- ") and ln.startswith("      ")]
    listed = {_name(r): r.replace(" ", "") for r in pip_lines if not r.startswith(("-e", "-c"))}
    assert listed == wanted, (
        "environment.yml's pip list and pyproject.toml (dependencies + dev extra) differ: "
        f"only in environment.yml: {sorted(set(listed.items()) - set(wanted.items()))}; "
        f"only in pyproject.toml: {sorted(set(wanted.items()) - set(listed.items()))}")
    assert "-e ." in pip_lines, "environment.yml must install the labkit package itself"
    assert "-c requirements-lock.txt" in pip_lines, "environment.yml must install through the lock"


def test_ci_runs_the_readme_commands():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.DOTALL).group(1)
    commands = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(commands) == 2, f"the README's setup block should hold two commands: {commands}"
    install, test = commands
    for part in install.split("&&"):
        part = part.strip()
        if part.startswith("jupyter lab"):
            assert "jupyter lab --version" in ci  # CI has no screen: it checks the install instead
        else:
            assert part in ci, f"CI does not run the README's `{part}`"
    for part in test.split("&&"):
        assert part.strip() in ci, f"CI does not run the README's `{part.strip()}`"
