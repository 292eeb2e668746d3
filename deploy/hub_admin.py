"""Create the hub admin's account, approved, before the hub first opens.

    cd /etc/jupyterhub      # where the hub runs: JupyterHub's default database is relative to it
    sudo -E /opt/jupyterhub/bin/python /opt/grpo-lab/src/deploy/hub_admin.py -f jupyterhub_config.py

The shipped configs (``jupyterhub_config.py``, ``z2jh/values.yaml``) give the admin, named by
``GRPO_LAB_ADMIN``, JupyterHub's admin role, and keep the name out of ``Authenticator.admin_users``:
NativeAuthenticator approves every name there the moment someone signs up under it, so the first
visitor to sign up under the admin's name would become admin of every student's server. Then
nobody can approve the admin's own sign-up either; this command writes the admin's account into
the hub's database, approved, with a password typed twice (or read as one line from standard
input with ``--password-stdin``). Once it exists, a sign-up under the name is refused as taken.

From the config it reads the database (``JupyterHub.db_url``; JupyterHub's default
``sqlite:///jupyterhub.sqlite`` is relative to the folder it runs in), the admin (the one user of
the admin role in ``JupyterHub.load_roles``) and NativeAuthenticator's password rules. The
database is created as JupyterHub creates it when it does not exist yet.

Run again, it leaves an approved account as it is. An unapproved account under the admin's name is
someone's sign-up (it could never log in): it is replaced, and the command says so.

Needs the hub's environment (``jupyterhub``, ``jupyterhub-nativeauthenticator``).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

DEFAULT_DB_URL = "sqlite:///jupyterhub.sqlite"


def load_config(path: Path):
    """The hub config at ``path`` (``.py`` as JupyterHub runs it, or ``.json``)."""
    from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader

    if not path.is_file():
        raise ValueError(f"config: {str(path)!r} is not a file; expected the hub's "
                         "jupyterhub_config.py")
    loader = JSONFileConfigLoader if path.suffix == ".json" else PyFileConfigLoader
    return loader(path.name, path=str(path.parent)).load_config()


def admin_name(config) -> str:
    """The one user of the admin role; refuses a config that would pre-approve an admin."""
    if config.Authenticator.get("admin_users"):
        raise ValueError(f"Authenticator.admin_users: expected none (NativeAuthenticator approves "
                         f"these names on sign-up), got {sorted(config.Authenticator.admin_users)};"
                         " give the admin JupyterHub's admin role in JupyterHub.load_roles")
    users = [user for role in config.JupyterHub.get("load_roles", [])
             if role.get("name") == "admin" for user in role.get("users", [])]
    if len(users) != 1:
        raise ValueError(f"JupyterHub.load_roles: expected one user in the admin role, got {users}")
    return users[0]


def create_admin(config, password: str) -> str:
    """Write the admin's approved account into the config's database; returns what was done."""
    import bcrypt
    from jupyterhub import orm
    from nativeauthenticator import NativeAuthenticator
    from nativeauthenticator.orm import UserInfo  # its table joins JupyterHub's before creation

    authenticator = NativeAuthenticator(config=config, add_new_table=False)
    name = authenticator.normalize_username(admin_name(config))
    if not authenticator.validate_username(name):
        raise ValueError(f"admin: {name!r} is not a name NativeAuthenticator accepts")
    if not authenticator.is_password_strong(password):
        common = " and not a common one" if authenticator.check_common_password else ""
        raise ValueError(f"password: expected at least {authenticator.minimum_password_length} "
                         f"characters{common}")
    db = orm.new_session_factory(config.JupyterHub.get("db_url", DEFAULT_DB_URL))()
    try:
        found = UserInfo.find(db, name)
        if found is not None and found.is_authorized:
            return f"{name}: the account exists and is approved; nothing changed"
        done = f"{name}: account created and approved"
        if found is not None:  # a stranger's sign-up (its password, e-mail, 2FA secret): gone
            db.delete(found)
            done = (f"{name}: replaced an unapproved sign-up under this name (someone signed up "
                    "as the admin; it could not log in) with your account, approved")
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt())
        db.add(UserInfo(username=name, password=hashed, is_authorized=True))
        db.commit()
        return done
    finally:
        db.close()
        db.get_bind().dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-f", "--config", type=Path, default=Path("jupyterhub_config.py"),
                        help="the hub's config (default: jupyterhub_config.py here)")
    parser.add_argument("--password-stdin", action="store_true",
                        help="read the password as one line from standard input (no prompt)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        name = admin_name(config)
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\r\n")
        else:
            password = getpass.getpass(f"password for {name}: ")
            if getpass.getpass("again: ") != password:
                raise ValueError("password: the two entries differ")
        print(create_admin(config, password))
    except ValueError as error:
        parser.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
