"""Fine-tuning without RL: supervised fine-tuning on (prompt, completion) pairs with the loss on
completion tokens only (``sft``), and rejection-sampling fine-tuning on the policy's own verified
samples (``rft``). Import from the module (``from labkit.finetune.sft import ...``).
"""
