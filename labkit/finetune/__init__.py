"""Fine-tuning without RL: supervised fine-tuning on (prompt, completion) pairs with the loss on
completion tokens only (``sft``), rejection-sampling fine-tuning on the policy's own verified
samples (``rft``), and the same supervised loss mixed into an RL step on warm-start data
(``ptx``, the PTX loss). Import from the module (``from labkit.finetune.sft import ...``).
"""
