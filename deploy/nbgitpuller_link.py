"""Print an nbgitpuller link: one click pulls the lab into a student's hub home and opens a notebook.

    python deploy/nbgitpuller_link.py --hub https://hub.example.org \\
        --repo https://github.com/example/grpo-lab --branch main \\
        --notebook notebooks/00_tour.ipynb

The link is ``<hub>/hub/user-redirect/git-pull?repo=...&branch=...&targetpath=...&urlpath=...``:
the hub logs the student in and sends them to their own server, where nbgitpuller clones the
repository into ``~/<targetpath>`` (on later clicks it merges new commits without overwriting the
student's own edits) and then opens ``urlpath``, ``lab/tree/<targetpath>/<notebook>`` in
JupyterLab. ``targetpath`` is the repository's name less ``.git``, given explicitly because
nbgitpuller's own default keeps a ``.git`` suffix, which would break ``urlpath``. Every query value
is percent-encoded whole (``/``, ``:`` and ``?`` included).

The link goes to every student, so the hub and repository URLs may carry no credentials: a
``user:password@`` or a token before the host, or a query or fragment (where ``access_token=``
and ``token=`` live) is refused, and the error shows the URL with them masked. nbgitpuller clones
anonymously: the repository must be public (or reachable from the hub without credentials).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import PurePosixPath
from urllib.parse import quote, urlsplit, urlunsplit

INTERFACES = {"lab": "lab/tree", "notebook": "tree"}


def _masked(value: str) -> str:
    """``value`` with what may be a credential masked: the part before ``@`` in the host, and
    the values of the query and the fragment (an error message must not spread them either)."""
    parts = urlsplit(value)
    if "@" not in parts.netloc and not parts.query and not parts.fragment:
        return value
    host = parts.netloc.rpartition("@")[2]
    query = "&".join(f"{key}=***" if sep else "***" for key, sep, _ in
                     (item.partition("=") for item in parts.query.split("&"))) if parts.query \
        else ""
    return urlunsplit((parts.scheme, f"***@{host}" if "@" in parts.netloc else host, parts.path,
                       query, "***" if parts.fragment else ""))


def _check_url(field: str, value: str) -> str:
    parts = urlsplit(value)
    if "@" in parts.netloc:
        raise ValueError(f"{field}: expected a URL without credentials (user:password@ or a token "
                         f"before the host): every student would receive them in the link; got "
                         f"{_masked(value)!r}")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{field}: expected an http(s) URL with a host, got {_masked(value)!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"{field}: expected a URL without a query or fragment (they may hold "
                         f"credentials such as access_token=, which every student would receive "
                         f"in the link), got {_masked(value)!r}")
    return value.rstrip("/")


def repo_folder(repo: str) -> str:
    """The folder nbgitpuller clones into: the repository's last path part, less ``.git``."""
    name = urlsplit(repo).path.rstrip("/").rsplit("/", 1)[-1]
    name = name.removesuffix(".git")
    if not name:
        raise ValueError(f"repo: cannot tell the repository's name from {repo!r}")
    return name


def nbgitpuller_link(hub: str, repo: str, branch: str, notebook: str,
                     interface: str = "lab") -> str:
    """The link for ``notebook`` (a path inside the repository) on ``hub``."""
    hub = _check_url("hub", hub)
    repo = _check_url("repo", repo)
    if not branch or branch != branch.strip() or any(ch in branch for ch in " ~^:?*[\\"):
        raise ValueError(f"branch: expected a git branch name, got {branch!r}")
    path = PurePosixPath(notebook)
    if not notebook or path.is_absolute() or ".." in path.parts or "\\" in notebook:
        raise ValueError(f"notebook: expected a relative path inside the repository such as "
                         f"'notebooks/00_tour.ipynb', got {notebook!r}")
    if interface not in INTERFACES:
        raise ValueError(f"interface: expected one of {sorted(INTERFACES)}, got {interface!r}")
    folder = repo_folder(repo)
    urlpath = f"{INTERFACES[interface]}/{folder}/{path.as_posix()}"
    query = "&".join(f"{key}={quote(value, safe='')}" for key, value in
                     (("repo", repo), ("branch", branch), ("targetpath", folder),
                      ("urlpath", urlpath)))
    return f"{hub}/hub/user-redirect/git-pull?{query}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hub", required=True, help="the hub's public URL")
    parser.add_argument("--repo", required=True, help="the lab's git repository URL")
    parser.add_argument("--branch", default="main", help="branch to pull (default main)")
    parser.add_argument("--notebook", default="notebooks/00_tour.ipynb",
                        help="notebook to open, relative to the repository root")
    parser.add_argument("--interface", default="lab", choices=sorted(INTERFACES),
                        help="JupyterLab (lab, default) or the classic file tree (notebook)")
    args = parser.parse_args(argv)
    try:
        print(nbgitpuller_link(args.hub, args.repo, args.branch, args.notebook, args.interface))
    except ValueError as error:
        parser.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
