"""Sales pressure in any domain's words: generic English patterns the lexicon reads in every turn (deadlines,
scarcity, everyone-else-did, threats, the caller's own stakes, guilt), beside each scenario's own pressure phrases.
Chosen on the ear lines of the shipped scenarios and the four further line sets (docs/results.md); each pattern
names a shape, not a domain's words."""
from __future__ import annotations

import re
from collections.abc import Sequence

GAP = r"(?:\s+\w+){0,4}?"          # up to four words between two cues
_SOON = r"(?:now|today|tonight|immediately|right away|quickly|fast|at once)"
EVERYONE_ELSE = object()   # the place of the everyone-else-did pattern, which names the scenario's peers


def _everyone_else(peers: Sequence[str]) -> str:
    """'Other restaurants have already signed': `peers` are the user's peers in the scenario's words
    (`rule_user.peers`), beside the peers of any domain (businesses, people)."""
    others = "|".join(["businesses", "people", *(re.escape(p.lower()) for p in peers)])
    return (rf"\b(?:everyone|everybody|all (?:the )?(?:other|your)|other (?:{others})|"
            rf"your (?:neighbou?rs|competitors|rivals))\b{GAP}\s+(?:already|has|have|are|is|signed|joined|said yes|"
            r"agreed|using|doing)")


_PATTERNS = (
    # obligation and urgency to decide
    rf"\b(?:have to|has to|must|need to|needs to|got to|gotta|should)\b{GAP}\s+"
    r"(?:decide|answer|agree|commit|sign|say yes|act|choose)\b",   # not "need to activate it in the app"
    rf"\b(?:(?:decide|sign|agree|commit|answer|join|accept)\w*|act(?:ing)?)\s+(?:up\s+)?{_SOON}\b",   # not "activated today"
    # (speed alone is no pressure: "I can set it up right away" is service; "decide right away" is caught above)
    r"\b(?:hurry|asap|urgent|urgently|without delay|no time to (?:lose|waste)|clock is ticking)\b",
    r"\b(?:don't|do not|never) (?:wait|hesitate|think too long|delay)\b",
    r"\b(?:don't|do not) (?:think|worry) (?:about it )?too (?:much|long)\b|\bjust (?:agree|say yes|sign)\b",
    r"\bsay yes (?:now|today|tonight|right now|quickly)\b|\b(?:need|want) (?:an|your) (?:answer|decision) "
    r"(?:now|today|tonight|right now)\b",
    rf"\b(?:foolish|stupid|crazy|silly|mad|insane)\b{GAP}\s+(?:say no|refuse|pass|decline|miss|turn (?:it|this) down)",
    # deadlines, scarcity and vanishing offers
    rf"\b(?:offer|deal|chance|opportunity|spots?|places?)\b{GAP}\s+(?:ends?|ending|expires?|expiring|"
    r"is gone|will be gone|goes away|disappears?|vanish\w*|runs? out|closes?\b(?! to\b)|won't last|will not last)",
    r"\b(?:ends?|expires?|gone|over|closes?)\s+(?:today|tonight|tomorrow|at midnight|soon|"
    r"this (?:week|evening|afternoon))\b",
    r"\b(?:won't|will not|can't|cannot|not) (?:be around|last long|stay open|keep (?:this|it) open|hold (?:it|this))\b",
    r"\b(?:hold|keep|reserve) (?:it|this|the \w+)(?: open)? (?:for you )?(?:only )?until\b|"
    r"\buntil (?:tonight|midnight|the end of (?:the )?(?:day|week|today))\b|\bgrab it (?:now|today|while)\b",
    r"\bbefore (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|the weekend|the end of|we hang up|"
    r"you hang up|midnight|tonight|tomorrow|it's too late|it is too late|someone else)\b",
    rf"\b(?:price|prices|cost|costs|fee|fees)\b{GAP}\s+(?:go(?:es)? up|going up|rises?|increases?|doubles?)\b",
    r"\b(?:time|it|this|spots?|places?|stock) (?:is |are )?running out\b|\bsomeone else (?:will|would|could|might)\b",
    r"\b(?:today|tonight|this week) only\b|\bonly (?:today|tonight|this week)\b|\blimited (?:time|offer|spots?)\b",
    r"\b(?:only|just) (?:a few|a handful|\w+) (?:\w+ ){0,3}(?:are |is )?(?:left|remaining)\b|\bgoing fast\b|"
    r"\b(?:spots?|places?) (?:are |is )?(?:already )?taken\b",
    r"\b(?:last|final|only|one-time|once in a lifetime) (?:chance|day|opportunity|call|offer)\b",
    r"\bslip(?:s|ping)? away\b|\bmiss(?:ing)? out\b|\bdon't miss\b|\bnow or never\b|"
    r"\bwhile (?:it|stocks?|supplies) lasts?\b",
    # no second chance
    rf"\b(?:no|not|never|won't|will not|there won't be|there will not be)\b{GAP}\s+(?:second|another|other|new)\s+"
    r"(?:offer|chance|opportunity|deal|call)",
    r"\b(?:won't|will not|never) (?:be )?(?:offered|available|come|happen) again\b",
    # everyone else already did (the user's peers by name: _everyone_else)
    EVERYONE_ELSE,
    r"\b(?:have|has) already (?:signed|joined|gone|switched|said yes|agreed)\b|\b(?:be|feel) left out\b|"
    r"\b(?:be|being) the only (?:\w+ ){0,4}(?:without|who|left)\b",
    # threats and losses
    r"\b(?:you will|you'll|you are going to|you're going to) (?:lose|regret|be sorry|miss|pay for)\b",
    r"\b(?:we will|we'll|we are going to|we're going to|they will|they'll) (?:remove|cancel|suspend|close|delist|"
    r"block|report|downgrade|penali[sz]e)\b",
    r"\bor else\b|\bpenalt(?:y|ies)\b|\bconsequences\b|\bno choice\b|\bregret (?:it|this|not)\b",
    r"\b(?:drop|slide|fall|sink)\w* (?:down )?(?:in )?(?:the |your )?(?:search )?rankings?\b|\bflagged as\b|"
    r"\bend up closing\b",
    # the caller's own stakes
    r"\bin trouble\b|\bmy job(?:'s| is)? (?:at risk|on the line)\b|\b(?:hit|make|meet) my (?:target|quota)\b|"
    r"\b(?:out of my way|out on a limb)\b|\bmake me look bad\b|\b(?:manager|supervisor|boss) is listening\b",
    # guilt
    r"\blet(?:ting|s)? (?:\w+ )?down\b|\bthink (?:of|about) (?:the|your|those) (?:children|kids|family|families)\b",
    r"\bdisappoint\w*|\byour fault\b|\bshame\b|\bselfish\b|\bhow could you\b|\bdon't you care\b|"
    r"\bdo you not care\b|\bwill suffer\b|\bon your conscience\b|\bhow you'd feel\b|\blive with (?:the thought|"
    r"yourself)\b|\bonly a (?:fool|heartless)\b|\bsomeone (?:as \w+ as you|who cares)\b|\bno[- ]brainer\b|"
    r"\bbecause you (?:waited|hesitated|said no)\b|\bi'd (?:hate|feel terrible)\b",
)


def pressure_patterns(peers: Sequence[str] = ()) -> tuple[re.Pattern, ...]:
    """The generic patterns, compiled, the everyone-else-did one naming `peers` too."""
    return tuple(re.compile(_everyone_else(peers) if p is EVERYONE_ELSE else p) for p in _PATTERNS)


PRESSURE_PATTERNS = pressure_patterns()
