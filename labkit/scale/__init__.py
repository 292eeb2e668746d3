"""Beyond the tiny model: plan a run's memory before launch (``memory``), and measure: one GRPO
step against TRL's (``bench``) and the memory plan against a real step (``bench_memory``). The
low-rank adapters the trainer builds live with its machinery (:mod:`labkit.training.lora`). Import
from the module (``from labkit.scale.memory import ...``).
"""
