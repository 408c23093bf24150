"""Phase 2: one call as a state machine (dialogue) and many calls as coroutines (rollout)."""
