"""Beyond the tiny model: plan a run's memory before launch (``memory``), train low-rank adapters
(``lora``), and measure: one GRPO step against TRL's (``bench``) and the memory plan against a
real step (``bench_memory``). Import from the module (``from labkit.scale.memory import ...``).
"""
