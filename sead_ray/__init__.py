"""sead-ray: Ray-native SEAD self-play training of service-dialogue agents.

No module of this package imports ray, vllm or deepspeed at import time (`runs` and `cli` import
them inside the functions that start a run), so the algorithm is unit-testable in milliseconds.
"""
__version__ = "0.1.0"
