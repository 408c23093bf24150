"""The rehearsal's optimizer state does not reach self-play (sead_ray.training.warm_start.reset_optimizer_state)."""
import copy

import pytest
import torch

from sead_ray.training.warm_start import reset_optimizer_state


class WrapperStandIn:
    """Stands in for DeepSpeed's ZeRO optimizer wrappers: not a torch optimizer, it holds one as `.optimizer`."""

    def __init__(self, optimizer):
        self.optimizer = optimizer


def _step(model, optimizer, target):
    optimizer.zero_grad()
    ((model(torch.ones(1, 4)) - target) ** 2).sum().backward()
    optimizer.step()


def _rehearsed():
    """A model and its AdamW after three steps toward +5 (the rehearsal), the same every call."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    for _ in range(3):
        _step(model, optimizer, torch.full((1, 2), 5.0))
    return model, optimizer


def test_after_the_reset_a_step_is_a_fresh_optimizers_step():
    model, optimizer = _rehearsed()
    fresh_model = copy.deepcopy(model)
    fresh = torch.optim.AdamW(fresh_model.parameters(), lr=1e-2, weight_decay=0.0)
    carried_model, carried = _rehearsed()
    assert reset_optimizer_state(WrapperStandIn(optimizer)) == 2     # weight and bias
    for m, opt in ((model, optimizer), (fresh_model, fresh), (carried_model, carried)):
        _step(m, opt, torch.full((1, 2), -5.0))    # self-play's first step points the other way
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh_model.parameters()))
    # without the reset the step differs (the rehearsal's moments carried): the test can fail
    assert not all(torch.equal(a, b) for a, b in zip(carried_model.parameters(), fresh_model.parameters()))


def test_an_optimizer_with_no_torch_optimizer_inside_is_refused():
    with pytest.raises(TypeError, match="no torch optimizer"):
        reset_optimizer_state(object())
