"""The update's loss path, eager or compiled (``TrainConfig.compile_loss``).

Every micro-batch of an update turns the model's logits into a loss in two pure tensor
functions. With ``compile_loss=True`` both run through ``torch.compile``:

* :func:`labkit.logprobs.whole_logprobs_and_entropy`: log-probs of the sampled tokens and the
  entropies, from the (b, l, V) logits (eager: the chunked
  :func:`~labkit.logprobs.logprobs_and_entropy`);
* :func:`labkit.losses.policy.policy_loss_terms`: ratio, surrogate, KL, aggregation, entropy
  bonus and the clip and ratio metrics (eager: the same function).

**Why.** Eagerly, a GRPO micro-batch runs about two hundred small operations through them,
forward and backward (226 aten operations under ``torch.profiler`` on the CPU, 16 x 32 tokens),
nearly all elementwise ops and reductions over a (b, l) tensor. On a GPU each is a kernel launch
that costs more than its arithmetic at the tiny model's size: the path is launch-bound. Inductor
fuses them into a handful of kernels. The checks before them (shapes, finite values, token
range, the loss type's options) stay eager, outside the compiled region: they raise and read
values back to the host, which a graph cannot.

**Shapes.** Both are compiled with ``dynamic=True``: the rows and the completion length of a
micro-batch, and the temperature, are symbols of the graph, so a new length does not recompile.
Dynamo still specialises sizes 0 and 1 (a one-row micro-batch compiles once more) and keeps the
run's constants (loss type, epsilons, which inputs are None) as constants. ``fullgraph=True``: a
graph break, which would leave part of the path eager without a word, is a failure instead.
Each run compiles copies of its own (:func:`_own_copy`): its graphs are not shared with another
run's and are freed with it.

**Where it departs from eager.** Float rounding only: Inductor fuses and reorders the reductions
(``tests/test_compile.py`` bounds the difference). The no-grad scoring forwards (old and
reference log-probs) stay eager, so an off-policy ratio starts from 1 up to that rounding.

**Fallback.** When ``torch.compile`` is unavailable or fails (a Python or platform Dynamo does
not support, no working C++ compiler, a Dynamo or Inductor error at a first call, a recompile past
Dynamo's limit), the run goes on eagerly from that call on, never trying again, and prints one
line naming why. The failing call's values are the eager ones; a micro-batch whose log-probs had
already been computed compiled keeps them.
"""

from __future__ import annotations

import contextlib
import functools
import re
import types
from pathlib import Path

import torch

from labkit.logprobs import check_logprob_inputs, logprobs_and_entropy, whole_logprobs_and_entropy
from labkit.losses.policy import policy_loss, policy_loss_terms


class LossPath:
    """One run's loss path; the trainer holds one per run, as it holds its
    :class:`~labkit.sampling.Decoder`. ``compiled``: compile the path (else every call is the
    eager function, unchanged). ``failure``: why it runs eagerly after all (None while it
    compiles). It prints its plan in one line once both compiled functions have run, and a
    failure in one line when it happens."""

    def __init__(self, compiled: bool = False):
        if not isinstance(compiled, bool):  # a string "False" would compile
            raise TypeError(f"compiled must be True or False, got {compiled!r}")
        self.compiled, self.failure = compiled, None
        self._functions = {}
        if compiled:
            try:
                self._functions = {name: torch.compile(_own_copy(fn), dynamic=True,
                                                       fullgraph=True)
                                   for name, (fn, _) in _COMPILED.items()}
            except Exception as error:  # noqa: BLE001 (e.g. a Python Dynamo does not support)
                self.failure = f"torch.compile is unavailable ({_why(error)})"
                print(self)
        self._untried = set(self._functions)

    def logprobs(self, logits, tokens, temperature: float, check_tokens: bool = True):
        """Log-probs and entropies, as :func:`labkit.logprobs.logprobs_and_entropy` returns them."""
        if not self.compiled:
            return logprobs_and_entropy(logits, tokens, temperature, check_tokens=check_tokens)
        check_logprob_inputs(logits, tokens, temperature, check_tokens)
        return self._call("log-probs", _checked_logprobs_and_entropy, logits, tokens, temperature)

    def policy_loss(self, *args, **kwargs):
        """:func:`labkit.losses.policy_loss`: its checks eager, then its terms."""
        if not self.compiled:
            return policy_loss(*args, **kwargs)
        return policy_loss(*args, **kwargs,
                           terms=functools.partial(self._call, "policy loss", policy_loss_terms))

    def _call(self, name: str, eager, *args, **kwargs):
        """The compiled ``name`` of these inputs; ``eager``'s from the first failure on."""
        if self.failure is None:
            try:
                with _dynamo_settings(**_COMPILED[name][1]):
                    result = self._functions[name](*args, **kwargs)
            except Exception as error:  # noqa: BLE001 (Dynamo and Inductor raise many types)
                self.failure = f"torch.compile failed on the {name} ({_why(error)})"
                print(self)
            else:
                if name in self._untried:
                    self._untried.discard(name)
                    if not self._untried:
                        print(self)
                return result
        return eager(*args, **kwargs)

    def __str__(self) -> str:
        if not self.compiled:
            return "loss path: eager (compile_loss=False)"
        if self.failure is not None:
            return f"loss path: eager; compile_loss fell back: {self.failure}"
        return "loss path: log-probs and policy loss compiled by torch.compile (dynamic shapes)"

    def __repr__(self) -> str:
        return f"LossPath(compiled={self.compiled}, failure={self.failure!r})"


#: The compiled functions, by name, each with Dynamo settings of its own. The policy loss's
#: floats (epsilons, beta, entropy_coef, the loss type's options) are the run's constants:
#: specialised, they fold into the kernels, and the checks on them inside the loss trace. The
#: temperature, which a schedule changes every step, stays a symbol of the log-probs' graph.
_COMPILED = {"log-probs": (whole_logprobs_and_entropy, {}),
             "policy loss": (policy_loss_terms, {"specialize_float": True})}


def _own_copy(fn):
    """``fn`` with a code object of its own. Dynamo keeps a function's compiled graphs on its
    code object and refuses to compile it again past ``torch._dynamo.config.recompile_limit``
    graphs: a notebook's runs with different settings would add up on the shared one until the
    limit turned the next run eager; on copies each run counts only its own."""
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def _checked_logprobs_and_entropy(logits, tokens, temperature):
    """The eager log-probs and entropies of inputs :class:`LossPath` has checked."""
    return logprobs_and_entropy(logits, tokens, temperature, check_tokens=False)


def _why(error: Exception) -> str:
    """What the printed line says of a failure: ``Type: first line of the message``, and where in
    the traced code it happened when Dynamo's message says (the innermost frame it lists)."""
    message = str(error).strip()
    why = f"{type(error).__name__}: {message.splitlines()[0]}" if message else type(error).__name__
    frames = _TRACED_FRAME.findall(message)
    if frames:
        path, line, function = frames[-1]
        why += f" at {Path(path).name}:{line} in {function}"
    return why


#: A frame of the traced code as Dynamo's messages list it (``File "...", line N, in name``).
_TRACED_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\w+)')


@contextlib.contextmanager
def _dynamo_settings(**settings):
    """Dynamo's ``settings`` for one compiled call, and those under which every way a compile can
    fall short raises there, where :class:`LossPath` catches it: no error turned into a silent
    eager frame (``suppress_errors``, also set by TORCHDYNAMO_SUPPRESS_ERRORS), and the backward
    compiled with the forward rather than at the first ``backward()``, where a failure could no
    longer fall back (``force_non_lazy_backward_lowering``, where this torch has it)."""
    import torch._dynamo
    import torch._functorch.config

    with contextlib.ExitStack() as stack:
        stack.enter_context(torch._dynamo.config.patch(suppress_errors=False, **settings))
        if hasattr(torch._functorch.config, "force_non_lazy_backward_lowering"):
            stack.enter_context(
                torch._functorch.config.patch(force_non_lazy_backward_lowering=True))
        yield


__all__ = ["LossPath"]
