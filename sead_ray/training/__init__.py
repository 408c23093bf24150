"""Phase 3: the self-evolution loop, GRPO, the reward registry, the messages to the trainer ranks, checkpoints."""
