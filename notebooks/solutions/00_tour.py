"""Reference solutions to the exercises of notebooks/00_tour.ipynb.

``pass_at_k`` has the signature of the notebook's stub; the notebook checks it against labkit's
implementation with ``labkit.exercises.check_function``. ``LIFTABLE_CELLS`` answers the
prediction exercise (checked with ``labkit.exercises.check_liftable_cells``). Import with
``importlib.import_module("solutions.00_tour")`` (the name starts with a digit).
"""

import math


def pass_at_k(num_samples, num_correct, k):
    """Unbiased pass@k, the textbook form: 1 - C(n - c, k) / C(n, k), the chance that k answers
    drawn without replacement miss every right one. Python's integers are exact, so the
    binomials never overflow; the one division gives a float (labkit uses the running product
    prod_{i=n-c+1}^{n} (1 - k/i) instead)."""
    return 1.0 - math.comb(num_samples - num_correct, k) / math.comb(num_samples, k)


# Exercise 2 (prediction): read off the heat map of section 6. A cell gives GRPO a gradient where
# its prompts are sometimes right and sometimes wrong. A prompt solved with probability p gives a
# mixed group of 8 answers with probability 1 - p^8 - (1 - p)^8, above 0.6 for p between 0.12 and
# 0.88: so every cell whose accuracy lies clearly between 0% and 100% (here about 10% to 90%),
# even one at 12%, and none at 0-6% (all-wrong groups) or above about 90% (all-right groups).
LIFTABLE_CELLS = ["add d1", "add d2", "add d3", "countdown d1", "mul d1",
                  "sort d1", "sort d2", "sort d3", "sub d2", "sub d3"]
