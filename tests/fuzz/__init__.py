"""Hostile inputs for the surfaces added since the first reliability round (see
``tests/test_fuzz_round2.py``): one module of cases per surface, the harness that runs a case and
names its outcome, and ``python tests/fuzz/tally.py``, which counts the outcomes per surface."""
