"""The parts of a training run that :class:`labkit.trainer.Trainer` composes: what no notebook needs
to read to follow the algorithm.

========================  ==========================================================================
module                    what
========================  ==========================================================================
``batches.py``            a step's batch: the run's :class:`Sampling` (policy, prompt order,
                          random stream, rewards, decoder) samples and scores it; the async
                          producers are handed the same object
``forward.py``            the training forward: log-probs and entropies of completions, each
                          distinct prompt run once and its KV cache shared, length-packed micro-batches
``compiled.py``           the update's loss path (log-probs, entropies, policy loss): eager, or
                          through torch.compile with ``compile_loss``, falling back by name
``scoring.py``            rewards of a sampled round, the sampling metrics, context checks
``run_control.py``        interrupts that never tear a step, random-state capture, the NaN-guarded
                          optimizer step
``checkpoint.py``         saving and resuming a run without running code from the files
``data.py``               prompt datasets: what a train or eval split must hold
``lora.py``               LoRA adapters through peft: the policy's low-rank update, its free
                          reference (adapters disabled), merging into a plain model
========================  ==========================================================================
"""
