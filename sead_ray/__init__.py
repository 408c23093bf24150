"""sead-ray: Ray-native SEAD self-play training of service-dialogue agents.

The modules of this package (but `driver` and `cli`) import neither ray nor vllm at import time, so
the algorithm is unit-testable in milliseconds.
"""
__version__ = "0.1.0"
