"""Fast tests by package, without Ray: a unit test that would start a Ray cluster fails instead."""
import pytest


@pytest.fixture(autouse=True, scope="session")
def no_ray_cluster():
    import ray
    real_init = ray.init

    def refuse(*args, **kwargs):
        raise AssertionError("a unit test started Ray: it belongs in tests/system/")
    ray.init = refuse
    yield
    ray.init = real_init
