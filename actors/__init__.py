"""Thin Ray actors around engines and state; the algorithm lives in sead_ray."""
