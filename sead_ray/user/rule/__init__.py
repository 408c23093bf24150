"""The rule user simulator (`user.backend: rule`): the transparent state machine (simulator.py), how it hears an
agent's turn (its ears: the lexicon's, ears.py; the sentence-embedding model's, semantic_ear.py, with its probe,
prototypes and negation rule) and what it holds a statement to (fact_check.py, reading each clause's claims with
clause_claims.py)."""
