"""Round two of the hostile fuzz: the surfaces added since tests/test_reliability.py, attacked as
a hostile user would (the cases live in tests/fuzz/, one module per surface; ``python
tests/fuzz/tally.py`` counts their outcomes).

Every case must end *clear* (refused with a ValueError/TypeError, or the surface's own error,
whose message names the input, its value and what is allowed) or *handled* (an acceptable input
accepted, with a result its check approves): never silently accepted, never an unhelpful crash,
never a hang. Surfaces: 1 reference-run specs, 2 the TRL bridge's settings and commands, 3 reward
functions under TRL, 4 verifiers/TTRL/judge on adversarial completions, 5 the memory planner, 6
the run doctor, 7 LoRA and checkpoints, 8 interrupts (below), 9 the exercises' checkers, 10 the
preflight check on a broken install, 11 the classroom deployment's authentication.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

import pytest
from fuzz import (
    checkpoints,
    deploy,
    doctor,
    exercises,
    interrupts,
    memory,
    preflight,
    specs,
    trl_rewards,
    trl_settings,
    verifiers,
)
from fuzz.harness import assert_good, case_params
from fuzz.scratch import scratch, write

pytestmark = pytest.mark.usefixtures("one_thread")
POSIX_SIGNALS = pytest.mark.skipif(sys.platform == "win32",
                                   reason="sends POSIX signals to a forked child")


@pytest.mark.parametrize("case", case_params(specs))
def test_reference_run_specs(case):
    assert_good(case)


@pytest.mark.parametrize("case", case_params(trl_settings))
def test_trl_bridge_settings_and_commands(case):
    assert_good(case)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # TRL's deprecations, as test_trl_bridge
@pytest.mark.parametrize("case", case_params(trl_rewards))
def test_reward_functions_under_trl(case):
    assert_good(case)


@pytest.mark.parametrize("case", case_params(verifiers))
def test_verifiers_ttrl_and_judge(case):
    assert_good(case)


@pytest.mark.parametrize("case", case_params(memory))
def test_memory_planner(case):
    assert_good(case)


@pytest.mark.parametrize("case", case_params(doctor))
def test_run_doctor(case):
    assert_good(case)


@pytest.mark.parametrize("case", case_params(checkpoints))
def test_lora_and_checkpoints(case):
    assert_good(case)


@pytest.mark.parametrize("case", case_params(exercises))
def test_exercise_checkers(case):
    assert_good(case)


@pytest.mark.parametrize("case", case_params(preflight))
def test_preflight_check(case):
    assert_good(case)


@pytest.mark.parametrize("case", case_params(deploy))
def test_deployment_authentication(case):
    assert_good(case)


# ---- 1. a spec is data: nothing in it is imported or run ---------------------------------------
def test_no_spec_imports_or_runs_code(monkeypatch):
    from labkit.commands import reference_runs

    folder = scratch("code")
    marker = folder / "ran"
    module = "fuzz_round2_spec_payload"
    (folder / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.chdir(folder)
    hostile = [
        {"preset": "grpo", "reward_funcs": [f"{module}.reward"]},
        {"preset": "grpo", "reward_funcs": [f"{module}:reward"]},
        {"preset": "grpo", "reward_funcs": [module]},
        {"preset": module},
        {"preset": f"__import__('{module}')"},
        {"preset": "grpo", "overrides": {"model_name_or_path": f"__import__('{module}')"},
         "about": f"import {module}"},
        {"preset": "grpo", "overrides": {module: 1}},
        {"preset": "grpo", "data": {"families": [f"__import__('{module}')"]}},
    ]
    for i, spec in enumerate(hostile):
        path = folder / f"spec{i}.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        try:
            loaded = reference_runs.load_spec(path)
            reference_runs.reward_funcs(loaded, path)
        except (ValueError, TypeError):
            pass
    assert module not in sys.modules
    assert not marker.exists()


def test_a_bad_spec_among_several_stops_the_command_before_any_training(monkeypatch):
    from labkit.commands import reference_runs

    trained = []
    monkeypatch.setattr(reference_runs, "train", lambda *a, **k: trained.append(a))
    good = write("good.json", json.dumps({"preset": "grpo", "overrides": {"max_steps": 1}}))
    bad = write("bad.json", json.dumps({"preset": "grpo", "seeds": [0, 0]}))
    with pytest.raises(ValueError, match="bad.json.*seeds"):
        reference_runs.main([str(good), str(bad)])
    assert trained == []


def test_code_in_a_trl_train_setting_never_runs():
    from labkit.trl_bridge import train as trl_train

    marker = scratch("set") / "ran"
    overrides = trl_train.parse_overrides([f"learning_rate=open({str(marker)!r}, 'w')",
                                          f"about=__import__('os').system('touch {marker}')"])
    assert all(isinstance(v, str) for v in overrides.values())
    assert not marker.exists()


# ---- 8. interrupts ------------------------------------------------------------------------------
@POSIX_SIGNALS
def test_sigterm_and_sigint_are_held_inside_a_guarded_block():
    from labkit.training.run_control import InterruptGuard

    guard = InterruptGuard()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with guard:
            os.kill(os.getpid(), signum)  # recorded, not acted on
        with pytest.raises(KeyboardInterrupt):
            guard.raise_if_requested()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is put back


@POSIX_SIGNALS
def test_terminate_as_interrupt_turns_sigterm_into_keyboard_interrupt_and_restores():
    from labkit.training.run_control import InterruptGuard, terminate_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), terminate_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(5)  # the handler raises here
    assert signal.getsignal(signal.SIGTERM) == before
    guard = InterruptGuard()
    with terminate_as_interrupt(), guard:  # inside a guarded block SIGTERM waits like Ctrl-C
        os.kill(os.getpid(), signal.SIGTERM)
    assert guard.requested


@POSIX_SIGNALS
def test_the_two_interrupted_runs_are_what_they_claim():
    history, _, _ = interrupts.baseline("dapo")
    assert (history["groups_dropped"] > 0).any(), "dynamic sampling never dropped a group"
    history, weights, _ = interrupts.baseline("lora_grpo")
    assert len(history) == interrupts.STEPS and any("lora_" in k for k in weights)


@pytest.mark.slow
@POSIX_SIGNALS
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_run_killed_at_a_random_moment_resumes_bit_for_bit(signum):
    """8 trials per signal (the LoRA GRPO and the DAPO run in turn, seeded delays): the newest
    whole checkpoint, resumed, ends with the uninterrupted run's history and weights. The fuzz
    tally runs 20 per signal (``python tests/fuzz/tally.py --interrupts 20``, recorded in
    ``tests/fuzz/tally_after.txt``); the suite keeps 8 to stay within CI's time."""
    trials = [interrupts.run_trial(kind, signum, delay, scratch("trial"))
              for kind, delay in interrupts.schedule(signum, 8, seed=0)]
    bad = [t for t in trials if not t.ok]
    assert not bad, "\n".join(map(str, bad))
    # The delays are seeded but the runs' speed is the machine's: on a loaded 2-core CI run 3 of
    # the 8 SIGTERM trials landed before the end (4 on an idle one), so 3 is the floor kept.
    assert sum(not t.finished for t in trials) >= 3, "too few signals came before the run's end"


@POSIX_SIGNALS
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_between_steps_saves_the_last_step_without_save_every(signum):
    """Ctrl-C, and ``kill`` (SIGTERM: a scheduler's preemption, a container stopping), sent
    after step 3 from a callback (outside every guarded block): the run keeps step 3 and saves
    it, as save_on_interrupt promises."""
    folder = scratch("own-signal")
    assert interrupts.checkpoint_after_own_signal("lora_grpo", signum, 3, folder) == 3
