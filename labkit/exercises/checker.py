"""The function checker, :func:`check_function`: a learner's function against the reference on
random inputs, shape, then values, then gradients; :class:`LearnerError` when the learner's
function raises."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch


class LearnerError(RuntimeError):
    """The learner's function raised an exception (chained as ``__cause__``) on a check input."""


def _copy(inputs: Mapping[str, Any], requires_grad: bool) -> dict[str, Any]:
    """Independent copies, floating tensors as fresh leaves (with grad if asked)."""
    copies = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().clone()
            if requires_grad and value.is_floating_point():
                value.requires_grad_(True)
        copies[key] = value
    return copies


def _leaves(out, path: str = "output") -> list[tuple[str, Any]]:
    """(path, value) for each tensor or number in a (nested) tuple/list/dict output."""
    if isinstance(out, (tuple, list)):
        return [leaf for i, v in enumerate(out) for leaf in _leaves(v, f"{path}[{i}]")]
    if isinstance(out, Mapping):
        return [leaf for k, v in out.items() for leaf in _leaves(v, f"{path}[{k!r}]")]
    return [(path, out)]


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def _fmt(x: torch.Tensor) -> str:
    return f"{x.item():.4g}" if x.is_floating_point() else str(x.item())


def _got_expected(got: torch.Tensor, expected: torch.Tensor) -> str:
    """"got X, expected Y" with enough digits that X and Y differ, and a hint when they agree to
    three or more: a close miss is a convention (a std's divisor, an eps, a band's edge), not the
    formula."""
    if not (got.is_floating_point() and expected.is_floating_point()):
        return f"got {_fmt(got)}, expected {_fmt(expected)}"
    g, e = got.item(), expected.item()
    digits = 4
    while digits < 12 and f"{g:.{digits}g}" == f"{e:.{digits}g}":
        digits += 1
    text = f"got {g:.{digits}g}, expected {e:.{digits}g}"
    if math.isfinite(g) and math.isfinite(e) and g != e and abs(g - e) <= 1e-3 * abs(e):
        text += (f"; they agree to {digits - 1} digits, so look for a convention (a std's "
                 f"divisor, an eps, a band's edge) rather than the formula")
    return text


def _inputs_at(inputs: Mapping[str, Any], index: tuple[int, ...], shape: torch.Size) -> str:
    """The inputs at ``index`` of an output of ``shape`` (broadcast dims read at 0)."""
    parts = []
    for key, value in inputs.items():
        if not isinstance(value, torch.Tensor):
            parts.append(f"{key}={value!r}")
        elif index and value.dim() == len(shape) and all(
                s in (1, o) for s, o in zip(value.shape, shape)):
            at = tuple(0 if s == 1 else i for s, i in zip(value.shape, index))
            parts.append(f"{key}={_fmt(value.detach()[at])}")
        else:
            parts.append(f"{key}: shape {tuple(value.shape)}")
    return ", ".join(parts)


def _worst(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float):
    """None if close everywhere, else (max abs error, index of the worst mismatch)."""
    if got.dtype == torch.bool or expected.dtype == torch.bool:
        got, expected = got.to(torch.int64), expected.to(torch.int64)
    g, e = got.detach().to(torch.float64), expected.detach().to(torch.float64)
    close = torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    err = torch.nan_to_num((g - e).abs(), nan=torch.inf)
    err = torch.where(close, -1.0, err)
    flat = int(err.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), e.shape))
    return float(err.reshape(-1)[flat]), index


def _compare_values(name: str, got, expected, inputs, atol: float, rtol: float) -> str | None:
    if isinstance(expected, torch.Tensor) and not isinstance(got, torch.Tensor):
        return f"`{name}` returned {_describe(got)} but expected {_describe(expected)}"
    got_leaves, exp_leaves = _leaves(got), _leaves(expected)
    if len(got_leaves) != len(exp_leaves):
        return (f"`{name}` returned {len(got_leaves)} value(s) but the reference returns "
                f"{len(exp_leaves)}")
    for (path, g), (_, e) in zip(got_leaves, exp_leaves):
        where = "" if len(exp_leaves) == 1 else f" ({path})"
        if isinstance(e, torch.Tensor) and not isinstance(g, torch.Tensor):
            return f"`{name}` returned {_describe(g)}{where} but expected {_describe(e)}"
        g, e = torch.as_tensor(g), torch.as_tensor(e)
        if g.shape != e.shape:
            return (f"`{name}` returned shape {tuple(g.shape)}{where} but expected "
                    f"{tuple(e.shape)}")
        worst = _worst(g, e, atol, rtol)
        if worst is not None:
            err, index = worst
            return (f"values differ{where}: max abs error {err:.3g} at index {index} "
                    f"({_got_expected(g[index], e[index])}); inputs: "
                    f"{_inputs_at(inputs, index, e.shape)}")
    return None


def _gradients(out, inputs: Mapping[str, Any], weights: list[torch.Tensor]):
    """Gradient of sum(weight * output) w.r.t. each floating input tensor (zeros if unused)."""
    wrt = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.requires_grad}
    floats = [torch.as_tensor(v) for _, v in _leaves(out)]
    terms = [(t * w).sum() for t, w in zip(floats, weights)
             if t.is_floating_point() and t.requires_grad]
    if not terms:
        return {k: torch.zeros_like(v) for k, v in wrt.items()}
    grads = torch.autograd.grad(sum(terms), list(wrt.values()), allow_unused=True)
    return {k: torch.zeros_like(v) if g is None else g
            for (k, v), g in zip(wrt.items(), grads)}


def _has_gradient_path(out, inputs: Mapping[str, Any]) -> bool:
    """True when some floating input requires grad and some floating output depends on one."""
    return _floats_in_and_out(out, inputs) and any(
        torch.as_tensor(v).requires_grad for _, v in _leaves(out))


def _floats_in_and_out(out, inputs: Mapping[str, Any]) -> bool:
    """True when some input requires grad and some output is floating: a gradient could flow,
    so a reference whose output has none is detached on purpose (RL-PLUS's focal weight)."""
    return (any(isinstance(v, torch.Tensor) and v.requires_grad for v in inputs.values())
            and any(torch.as_tensor(v).is_floating_point() for _, v in _leaves(out)))


def check_function(learner_fn: Callable, reference_fn: Callable,
                   make_inputs: Callable[[torch.Generator], Mapping[str, Any]],
                   n_trials: int = 5, atol: float = 1e-6, rtol: float = 1e-5,
                   check_grad: bool = True, name: str | None = None, seed: int = 0) -> bool:
    """Check a learner's function against the reference on ``n_trials`` random inputs.

    Args:
        learner_fn: the learner's function, called with the keyword arguments of ``make_inputs``.
        reference_fn: labkit's implementation, called with the same arguments.
        make_inputs: ``generator -> dict of keyword arguments``, e.g. :func:`random_policy_batch`.
        n_trials: input draws (seeded ``seed``, ``seed + 1``, ...: the check is repeatable).
        atol, rtol: tolerances for values and gradients (``torch.isclose``).
        check_grad: also compare gradients w.r.t. every floating input tensor, through a
            random weighting of the outputs (so a gradient that only sums right is caught).
        name: how to call the function in messages (default: its ``__name__``).

    Returns:
        True if outputs (shape, values) and gradients match on every trial; otherwise prints the
        first difference and returns False. A stub that raises ``NotImplementedError`` returns
        False with a reminder. Any other exception from ``learner_fn`` is re-raised as
        :class:`LearnerError` with a hint.
    """
    _check_arguments(learner_fn, reference_fn, make_inputs, n_trials, atol, rtol, seed)
    name = name or getattr(learner_fn, "__name__", "your function")
    gradients_compared = False  # stays False where no float input reaches a float output
    detached = False  # float inputs and outputs, and the reference's output depends on none
    for trial in range(n_trials):
        generator = torch.Generator().manual_seed(seed + trial)
        made = make_inputs(generator)
        if not isinstance(made, Mapping):
            raise TypeError(f"make_inputs must return a dict of keyword arguments, got "
                            f"{type(made).__name__}")
        inputs = dict(made)
        ref_inputs, learner_inputs = _copy(inputs, check_grad), _copy(inputs, check_grad)
        expected = reference_fn(**ref_inputs)
        try:
            got = learner_fn(**learner_inputs)
        except NotImplementedError:
            print(f"Not implemented yet: replace the `raise NotImplementedError` in `{name}` "
                  "with your code, run that cell again, then this one.")
            return False
        except Exception as err:
            raise LearnerError(
                f"`{name}` raised {type(err).__name__}: {err}\nHint: it is called with keyword "
                f"arguments {_inputs_at(inputs, (), torch.Size())} and should return "
                f"{_describe(expected)} like the reference; the traceback above shows the line."
            ) from err
        problem = _compare_values(name, got, expected, inputs, atol, rtol)
        if problem is None and check_grad:
            weights = [torch.randn(torch.as_tensor(e).shape, generator=generator,
                                   dtype=torch.float64) for _, e in _leaves(expected)]
            ref_grads = _gradients(expected, ref_inputs, weights)
            learner_grads = _gradients(got, learner_inputs, weights)
            gradients_compared = gradients_compared or _has_gradient_path(expected, ref_inputs)
            detached = detached or _floats_in_and_out(expected, ref_inputs)
            for key, ref_grad in ref_grads.items():
                worst = _worst(learner_grads[key], ref_grad, atol, rtol)
                if worst is not None:
                    err, index = worst
                    problem = (f"values match but the gradient w.r.t. `{key}` differs: check "
                               f"where you detach/clip (max abs error {err:.3g} at index "
                               f"{index}: {_got_expected(learner_grads[key][index], ref_grad[index])})")
                    break
        if problem is not None:
            print(f"Not quite (trial {trial + 1} of {n_trials}): {problem}")
            return False
    if gradients_compared:
        checked = "values and gradients"
    elif detached:
        # the gradients were compared: the reference's are zero, so a learner's must be too
        checked = ("values, and no gradient: the reference's output is detached from its "
                   "inputs, and yours is too")
    elif check_grad:
        # integer lengths, boolean masks: there is no gradient to compare, so do not claim one
        checked = "values; its inputs or outputs are not floating tensors, so no gradient flows"
    else:
        checked = "values"
    print(f"Correct! `{name}` matches the reference on {n_trials} random inputs ({checked}).")
    return True


def _check_arguments(learner_fn, reference_fn, make_inputs, n_trials, atol, rtol, seed) -> None:
    """The checker's own arguments, refused by name (a learner's mistake is never one of these:
    these are how the notebook calls the checker)."""
    for label, fn in (("learner_fn", learner_fn), ("reference_fn", reference_fn),
                      ("make_inputs", make_inputs)):
        if not callable(fn):
            raise TypeError(f"{label} must be a function, got {type(fn).__name__} {fn!r}")
    if type(n_trials) is not int or n_trials < 1:
        raise ValueError(f"n_trials must be an integer >= 1 (a check of 0 inputs proves "
                         f"nothing), got {n_trials!r}")
    for label, value in (("atol", atol), ("rtol", rtol)):
        if not (isinstance(value, int | float) and not isinstance(value, bool)
                and 0 <= value < math.inf):
            raise ValueError(f"{label} must be a finite number >= 0, got {value!r}")
    if type(seed) is not int:
        raise TypeError(f"seed must be an integer, got {seed!r}")
