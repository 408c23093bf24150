"""Train, evaluate, compare, serve, ablate: the only importer of actors/; it assembles runs from the parts below."""
