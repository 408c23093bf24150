import pytest
import yaml

from sead_ray.core.config import ConfigError
from sead_ray.scenario.scenario import load_scenario
from tests.conftest import ROOT, SCENARIO


def test_default_scenario(scenario):
    assert scenario.schema.names == ("cooperation", "emotion", "trust")
    assert len(scenario.schema.grid()) == 120
    assert len(scenario.behaviors) == 97 and len(scenario.categories) == 14
    assert scenario.outcome_of_status == {"accept": "success", "refuse": "failure", "hangup": "failure"}
    allowed = scenario.allowed_states()
    assert (4, 0, 3) not in allowed          # eager but angry
    assert (3, 2, 0) not in allowed          # eager but sure of scam
    assert (2, 2, 2) in allowed
    assert 0 < len(allowed) < 120


def _write(tmp_path, tree):
    p = tmp_path / "scenario.yaml"
    p.write_text(yaml.safe_dump(tree))
    return p


def _base():
    tree = yaml.safe_load(SCENARIO.read_text())
    tree["behaviors"] = {"Cost": ["Asks about cost"], "Trust": ["Asks who is calling"]}
    tree["consistency"] = {"rules": []}
    tree.pop("rule_user")    # its concerns name the library's categories
    tree.pop("user_sets")    # and its sets the schema's dimensions
    return tree


def test_new_domain_needs_no_code(tmp_path):
    tree = _base()
    tree["name"] = "insurance_renewal"
    tree["state_schema"] = [{"name": "cooperation", "levels": ["no", "maybe", "yes"]},
                            {"name": "patience", "levels": ["none", "some"]}]
    tree["user"]["status_guards"] = {"accept": {"at_least": {"cooperation": 2}}}
    s = load_scenario(_write(tmp_path, tree))
    assert len(s.schema.grid()) == 6 and s.categories == ["Cost", "Trust"]


@pytest.mark.parametrize("mutate, needle", [
    (lambda t: t.pop("agent"), "missing required key 'agent'"),
    (lambda t: t["agent"].update(sop="one step"), "agent.sop must be a list, got 'one step'"),
    (lambda t: t["task"]["outcomes"].pop("accept"), "task.outcomes.accept"),
    (lambda t: t["task"]["outcomes"]["accept"].update(outcome="yes"), "task.outcomes.accept"),
    (lambda t: t.update(state_schema=[{"name": "x", "levels": ["only"]}]), "needs at least 2 levels"),
    (lambda t: t.update(state_schema="flat"), "state_schema"),
    (lambda t: t.update(extra_field=1), "unknown key 'extra_field'"),
    (lambda t: t.update(behaviors={"Cost": []}), "behaviors.Cost must not be empty"),
    (lambda t: t.update(behaviors={"file": "nowhere.json"}), "behaviors.file"),
    (lambda t: t["consistency"].update(rules=[{"when": {"mood": 1}}]), "unknown dimension 'mood'"),
    (lambda t: t["consistency"].update(rules=[{"when": {"trust": [3, 1]}}]), "consistency.rules[0].when.trust"),
    (lambda t: t["consistency"].update(rules=[{"when": {"trust": 1}, "behavior_categories": ["Nope"]}]),
     "behavior_categories"),
    (lambda t: t["consistency"].update(rules=[{"when": {"trust": [0, 5]}}]), "forbid every state of the grid"),
    (lambda t: t.update(user_sets={"soft": {"states": {"mood": 1}}}), "soft.states names unknown dimension 'mood'"),
    (lambda t: t.update(user_sets={"soft": {"states": {"trust": [4, 2]}}}), "user_sets.soft.states.trust"),
    (lambda t: t.update(user_sets={"soft": {"states": {"trust": 1}, "behaviors": [3, 1]}}), "user_sets.soft.behaviors"),
    (lambda t: t.update(user_sets={"x": {"states": {"trust": 1}, "colour": 1}}), "unknown key 'user_sets.x.colour'"),
    (lambda t: t["task"]["outcomes"].update(win={"outcome": "success", "meaning": "won"}), "task.outcomes.win"),
    (lambda t: t["agent"].update(role="  "), "agent.role must not be empty"),
    (lambda t: t["user"].update(title=3), "user.title must be a string, got 3"),
])
def test_malformed_scenarios_name_the_field(tmp_path, mutate, needle):
    tree = _base()
    mutate(tree)
    with pytest.raises(ConfigError) as exc:
        load_scenario(_write(tmp_path, tree))
    assert needle in str(exc.value) and "scenario.yaml" in str(exc.value)


def test_unreadable_scenario(tmp_path):
    with pytest.raises(ConfigError, match="cannot read scenario file"):
        load_scenario(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_scenario(bad)


RESTAURANT_WORDS = {"restaurant", "owner", "caller", "phone", "call", "yuan", "advertising", "platform", "lin",
                    "merchant", "credit", "activate", "promotion", "deposit"}


def test_a_second_domain_gets_no_word_of_the_first(smollm_tokenizer):
    """Every prompt of a chat-based charity scenario, rendered through the chat template, holds none of
    the restaurant promotion's domain words: they all come from the scenario file."""
    import re

    from sead_ray.agent.prompt import agent_messages
    from sead_ray.scenario.profiles import Profile
    from sead_ray.scenario.turn_protocol import UserRequest
    from sead_ray.user.llm_prompt import user_prompt_ids
    charity = load_scenario(ROOT / "configs" / "scenarios" / "charity_donation.yaml")
    profile = Profile((1, 1, 1), (charity.behaviors[0].text,))
    agent = agent_messages(charity, ["Who is this?"], ['{"reply": "Hi, Maya from Open Pages."}'],
                           privileged_states=[(1, 1, 1)])
    texts = [smollm_tokenizer.apply_chat_template(agent, tokenize=False)]
    for free_form in (False, True):
        request = UserRequest("d", 1, Profile(profile.state, profile.behaviors, free_form),
                              ["Hi, Maya from Open Pages.", "Would 10 euros a month work?"], ["Who is this?"], seed=0,
                              user_states=[(1, 1, 1)])
        texts.append(smollm_tokenizer.decode(user_prompt_ids(smollm_tokenizer, charity, request, budget=4096)))
    words = {w for text in texts for w in re.findall(r"[a-z]+", text.lower())}
    assert words & RESTAURANT_WORDS == set()
    assert {"donor", "assistant", "chat", "euros"} <= words        # its own words are there instead
