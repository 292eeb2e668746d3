"""Surface 10: the preflight check (``labkit.commands.check``) on a broken install: a missing model file,
a corrupted tokenizer.json (with and without a manifest rewritten to match it), a manifest that
cannot be read, a package reported too old or with a version that is not one, a broken lock
file; and the lock row on installs that differ from the lock only where they should (a CPU build
of torch without the lock's CUDA packages: no warning) or for real (a CUDA build missing one of
its libraries, a package at another version: a warning naming it). The check must never raise: it
reports NOT READY with a row that names what is wrong, or READY when nothing is."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import shutil
import sys
from pathlib import Path

from fuzz.harness import Case
from fuzz.scratch import scratch
from labkit.commands import check
from labkit.runtime import compat
from labkit.tasks import data_dir

SURFACE = 10


@functools.cache
def _pristine() -> Path:
    root = scratch("data") / "data"
    for folder in ("models/tiny-qwen", "models/tiny-judge", "tasks"):
        shutil.copytree(data_dir() / folder, root / folder)
    check.write_manifest(root)
    return root


def _copy() -> Path:
    root = scratch("broken") / "data"
    shutil.copytree(_pristine(), root)
    return root


def _run(break_it, lock=None, **patches):
    """``run_checks`` (no timing) on a copy of the data broken by ``break_it(root)``, with
    ``labkit.runtime.compat`` functions replaced by ``patches`` for the call."""
    def call():
        root = _copy()
        break_it(root)
        saved = {name: getattr(compat, name) for name in patches}
        for name, value in patches.items():
            setattr(compat, name, value)
        try:
            return check.run_checks(root, lock_file=check.LOCK_FILE if lock is None
                                    else lock(), timing=False)
        finally:
            for name, value in saved.items():
                setattr(compat, name, value)
    return call


def _verdict(status: str, row: str, *fragments):
    """The row ``row`` has ``status`` and names every fragment; NOT READY iff a row failed."""
    def assertion(checks):
        rows = {c.name: c for c in checks}
        assert row in rows, f"no {row!r} row in {[c.name for c in checks]}"
        found = rows[row]
        text = found.detail + " " + " ".join(found.fixes)
        assert found.status == status, f"{row}: {found.status} ({text})"
        missing = [f for f in fragments if f not in text]
        assert not missing, f"{row} does not name {missing}: {text}"
        if status == "fail":
            assert not check.ready(checks) and "NOT READY" in check.verdict(checks)
    return assertion


def _unlink(rel):
    return lambda root: (root / rel).unlink()


def _write(rel, content: bytes, manifest: bool = False):
    def breaker(root):
        path = root / rel
        if path.is_dir():
            shutil.rmtree(path)
        path.write_bytes(content)
        if manifest:
            check.write_manifest(root)
    return breaker


def _manifest_folder(root):
    (root / check.MANIFEST_NAME).unlink()
    (root / check.MANIFEST_NAME).mkdir()


def _manifest_dangling_link(root):
    (root / check.MANIFEST_NAME).unlink()
    os.symlink(root / "nowhere", root / check.MANIFEST_NAME)


def _lock(content: bytes):
    def make():
        path = scratch("lock") / "requirements-lock.txt"
        path.write_bytes(content)
        return path
    return make


def _version(mapping):
    real = compat.installed_version
    return lambda package: mapping.get(package, real(package))


def _main(break_it):
    def call():
        root = _copy()
        break_it(root)
        saved = os.environ.get("LABKIT_DATA")
        os.environ["LABKIT_DATA"] = str(root)
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                code = check.main(["--no-timing"])
        finally:
            if saved is None:
                os.environ.pop("LABKIT_DATA", None)
            else:
                os.environ["LABKIT_DATA"] = saved
        return code, out.getvalue()
    return call


def _exit(code, *fragments):
    def assertion(result):
        got, printed = result
        assert got == code, f"exit {got}, expected {code}: {printed}"
        missing = [f for f in fragments if f not in printed]
        assert not missing, f"output does not name {missing}: {printed}"
    return assertion


def _fake_site(dists: dict[str, tuple[str, list[str]]]) -> Path:
    """A site-packages folder holding only ``{name: (version, [Requires-Dist lines])}``
    distributions' metadata, as pip writes it: what an install looks like to the check."""
    site = scratch("site")
    for name, (version, requires) in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                 *(f"Requires-Dist: {line}" for line in requires)]
        (info / "METADATA").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return site


def _lock_row(lock: bytes, dists):
    """The lock row with the fake distributions first on sys.path (they shadow the real ones,
    as a virtual environment's site-packages does)."""
    def call():
        site = str(_fake_site(dists))
        sys.path.insert(0, site)
        try:
            return [check.check_lock(_lock(lock)())]
        finally:
            sys.path.remove(site)
    return call


def _no_cuda_names(rows):
    """On a torch without CUDA, the lock row names no CUDA package."""
    import torch

    (row,) = rows
    named = [word for word in ("nvidia-", "cuda-", "triton") if word in row.detail]
    assert torch.version.cuda is not None or not named, f"{row.status}: {row.detail}"


#: A lock with torch and one CUDA library of torch's CUDA build (a name no real install has).
CUDA_LOCK = b"torch==2.13.0\nnvidia-labkit-fuzz-cublas==13.1.1.3\n"


def cases() -> list[Case]:
    c = []

    def accept(name, call, assertion):
        c.append(Case(SURFACE, name, call, None, check=assertion, seconds=30.0,
                      prepare=_pristine))

    weights = "models/tiny-qwen/model.safetensors"
    tokenizer = "models/tiny-qwen/tokenizer.json"
    accept("intact", _run(lambda root: None), _verdict("ok", "data"))
    accept("missing-model-file", _run(_unlink(weights)),
           _verdict("fail", "data", weights, "git checkout"))
    accept("missing-tokenizer-file", _run(_unlink(tokenizer)), _verdict("fail", "data", tokenizer))
    accept("corrupted-tokenizer", _run(_write(tokenizer, b"{not json")),
           _verdict("fail", "data", tokenizer, "corrupted"))
    accept("corrupted-tokenizer-manifest-rewritten",
           _run(_write(tokenizer, b"{not json", manifest=True)),
           _verdict("fail", "model", "tiny-qwen"))
    accept("model-file-a-folder", _run(lambda root: _folder(root / weights)),
           _verdict("fail", "data", weights))
    accept("manifest-missing", _run(_unlink(check.MANIFEST_NAME)),
           _verdict("fail", "data", check.MANIFEST_NAME))
    accept("manifest-a-folder", _run(_manifest_folder), _verdict("fail", "data",
                                                                check.MANIFEST_NAME))
    accept("manifest-dangling-link", _run(_manifest_dangling_link),
           _verdict("fail", "data", check.MANIFEST_NAME))
    accept("manifest-not-utf8", _run(_write(check.MANIFEST_NAME, b"\xff\xfe\x00")),
           _verdict("fail", "data", check.MANIFEST_NAME))
    accept("manifest-escapes-the-folder", _run(_write(
        check.MANIFEST_NAME, b"0" * 64 + b"  ../../etc/passwd\n")),
        _verdict("fail", "data", "line 1"))
    accept("manifest-empty", _run(_write(check.MANIFEST_NAME, b"")),
           _verdict("fail", "data", check.MANIFEST_NAME))
    accept("manifest-without-the-weights", _run(_drop_line(weights)),
           _verdict("warn", "data", weights, "not verified"))
    accept("package-too-old", _run(lambda root: None, installed_version=_version(
        {"torch": "2.0.0"})), _verdict("fail", "packages", "torch 2.0.0", "torch>="))
    accept("package-missing", _run(lambda root: None, installed_version=_version(
        {"transformers": None})), _verdict("fail", "packages", "transformers", "not installed"))
    accept("package-version-not-a-version", _run(lambda root: None, installed_version=_version(
        {"torch": "unknown"})), _verdict("fail", "packages", "torch", "'unknown'"))
    accept("lock-bad-line", _run(lambda root: None, lock=_lock(b"torch>=2\n")),
           _verdict("warn", "lock", "line 1", "torch>=2"))
    accept("lock-not-utf8", _run(lambda root: None, lock=_lock(b"torch==\xff\n")),
           _verdict("warn", "lock", "requirements-lock.txt"))
    accept("data-folder-missing", lambda: check.run_checks(scratch("void") / "data",
                                                           timing=False),
           _verdict("fail", "data", check.MANIFEST_NAME))
    accept("command-missing-model-file", _main(_unlink(weights)),
           _exit(1, "NOT READY", weights))
    accept("command-intact", _main(lambda root: None), _exit(0, "READY"))
    accept("lock-cpu-torch-without-the-cuda-packages", _lock_row(
        CUDA_LOCK, {"torch": ("2.13.0+cpu", ["filelock"])}), _verdict("ok", "lock"))
    accept("lock-cuda-torch-missing-a-cuda-package", _lock_row(
        CUDA_LOCK, {"torch": ("2.13.0", ["nvidia-labkit-fuzz-cublas==13.1.1.3"])}),
        _verdict("warn", "lock", "nvidia-labkit-fuzz-cublas", "13.1.1.3", "not installed"))
    accept("lock-package-at-another-version", _lock_row(
        b"torch==2.13.0\nlabkit-fuzz-dep==2.0\n",
        {"torch": ("2.13.0+cpu", ["labkit-fuzz-dep"]), "labkit-fuzz-dep": ("1.5", [])}),
        _verdict("warn", "lock", "labkit-fuzz-dep", "tested with 2.0, found 1.5"))
    accept("lock-this-install-names-no-cuda-package-without-cuda",
           lambda: [check.check_lock()], _no_cuda_names)
    return c


def _folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _drop_line(rel):
    def breaker(root):
        manifest = root / check.MANIFEST_NAME
        lines = manifest.read_text(encoding="utf-8").splitlines(keepends=True)
        manifest.write_text("".join(line for line in lines if not line.rstrip().endswith(rel)),
                            encoding="utf-8")
    return breaker
