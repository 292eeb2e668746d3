"""A fuzz case is one hostile call and what a careful library does with it; running it gives one
of five outcomes, which ``tally.py`` counts per surface.

=========  ======================================================================================
outcome    meaning
=========  ======================================================================================
clear      refused with an allowed error type (ValueError/TypeError unless the case says
           otherwise) whose message holds every fragment the case names (the input, its value,
           what is allowed)
handled    an acceptable input (or a malformed one the API promises to score) accepted, with a
           result the case's check approves
silent     a wrong input accepted without complaint, or an accepted input with a wrong result
crash      any other exception: a KeyError, an AttributeError, a dependency's traceback, or an
           allowed error type that does not say what was wrong
hang       the call did not return within the case's time bound
=========  ======================================================================================
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

OUTCOMES = ("clear", "handled", "silent", "crash", "hang")
GOOD = ("clear", "handled")


@dataclass(frozen=True)
class Case:
    """One hostile input of one surface.

    ``refuse``: None when the input must be accepted (then ``check(result)`` may assert on the
    result), else the fragments the refusal's message must contain. ``errors``: the exception
    types that count as a refusal. ``seconds``: the time bound.
    """

    surface: int
    name: str
    call: Callable[[], Any]
    refuse: tuple[str, ...] | None = None
    errors: tuple[type[BaseException], ...] = (ValueError, TypeError)
    check: Callable[[Any], None] | None = None
    seconds: float = 5.0
    slow: bool = False
    isolate: bool = False
    """run in a forked child that is killed at the bound (a call that may never return)"""
    prepare: Callable[[], Any] | None = None
    """run before the clock starts (loading a model the call reuses)"""

    @property
    def id(self) -> str:
        return f"s{self.surface}-{self.name}"


@dataclass(frozen=True)
class Result:
    outcome: str
    detail: str
    seconds: float


def _outcome(case: Case, value, error: BaseException | None) -> tuple[str, str]:
    if error is None:
        if case.refuse is not None:
            return "silent", f"accepted, returned {_short(value)}"
        if case.check is not None:
            try:
                case.check(value)
            except AssertionError as failed:
                return "silent", f"accepted with a wrong result: {failed}"
        return "handled", f"accepted, returned {_short(value)}"
    text = f"{type(error).__name__}: {error}"
    if case.refuse is None or not isinstance(error, case.errors):
        where = traceback.extract_tb(error.__traceback__)[-1:]
        place = f" (at {where[0].filename}:{where[0].lineno})" if where else ""
        return "crash", _short(text, 400) + place
    missing = [f for f in case.refuse if f not in str(error)]
    if missing:
        return "crash", f"{_short(text, 400)} [does not name {missing}]"
    return "clear", _short(text, 400)


def _short(value, limit: int = 160) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit] + "..."


def _in_child(case: Case, pipe) -> None:
    start = time.perf_counter()
    value = error = None
    try:
        value = case.call()
    except BaseException as caught:  # noqa: BLE001 (the error is the finding)
        error = caught
    seconds = time.perf_counter() - start
    pipe.send((*_outcome(case, value, error), seconds))


def _run_isolated(case: Case, grace: float) -> Result:
    """Fork (POSIX): a child that never returns is killed, not left spinning in this process."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_in_child, args=(case, send), daemon=True)
    child.start()
    limit = max(grace, 3 * case.seconds)
    ready = receive.poll(limit)
    if not ready:
        child.kill()
        child.join()
        return Result("hang", f"still running after {limit:.0f} s (killed)", float("inf"))
    outcome, detail, seconds = receive.recv()
    child.join()
    if seconds > case.seconds:
        return Result("hang", f"took {seconds:.1f} s (bound {case.seconds:g} s); {detail}",
                      seconds)
    return Result(outcome, detail, seconds)


def run_case(case: Case, grace: float = 30.0) -> Result:
    """Run ``case.call`` in a worker thread (portable: no SIGALRM); a call still running after
    ``max(grace, 3 x case.seconds)`` is abandoned as a hang, one that returns after
    ``case.seconds`` counts as one too."""
    if case.prepare is not None:
        case.prepare()
    if case.isolate and "fork" in multiprocessing.get_all_start_methods():
        return _run_isolated(case, grace)
    box: dict[str, Any] = {}

    def target():
        start = time.perf_counter()
        try:
            box["value"] = case.call()
        except BaseException as error:  # noqa: BLE001 (the error is the finding)
            box["error"] = error
        box["seconds"] = time.perf_counter() - start

    worker = threading.Thread(target=target, daemon=True, name=f"fuzz-{case.id}")
    worker.start()
    worker.join(max(grace, 3 * case.seconds))
    if "seconds" not in box:
        return Result("hang", f"still running after {max(grace, 3 * case.seconds):.0f} s",
                      float("inf"))
    seconds = box["seconds"]
    outcome, detail = _outcome(case, box.get("value"), box.get("error"))
    if seconds > case.seconds:
        return Result("hang", f"took {seconds:.1f} s (bound {case.seconds:g} s); {detail}",
                      seconds)
    return Result(outcome, detail, seconds)


def case_params(module) -> list:
    """The cases of ``module`` as pytest parameters, each named by its id; slow cases marked."""
    import pytest

    return [pytest.param(case, id=case.id, marks=[pytest.mark.slow] if case.slow else [])
            for case in module.cases()]


def assert_good(case: Case) -> None:
    """Run ``case`` and fail unless it ends clear or handled, saying what happened."""
    result = run_case(case)
    assert result.outcome in GOOD, f"{case.id}: {result.outcome}: {result.detail}"
