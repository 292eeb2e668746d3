"""The tricks that sit around the core algorithm, one concept per module, each taught in a
notebook and each switched on by a :class:`~labkit.config.TrainConfig` field whose combination
rules live beside its code: group filtering (``filters``: GFPO, dynamic sampling), token-level
filters and penalties (``token_filters``: high-entropy tokens, Clip-Cov, KL-Cov), sampling
temperature schedules (``temperature``), the reference model's refresh (``reference``), prompt
sampling (``prompt_sampling``) and the sampler/trainer mismatch correction (``mismatch``). The
pre-training mix is SFT's loss, so it lives with SFT (:mod:`labkit.finetune.ptx`). Import from
the module (``from labkit.tricks.filters import ...``).
"""
