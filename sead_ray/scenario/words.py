"""How any text of a call splits into what the scenario's words are matched against: lower-case tokens and light
stems, sentences and clauses (questions marked: a question asserts nothing), negation within a clause, numbers and
their units. Generic English, no scenario: the scenario checks its `rule_user` terms with it, the rule user
(sead_ray.user.rule.lexicon) hears a turn with it, the scripted agent and the reports read sentences with it.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_TOKEN = re.compile(r"[a-z0-9]+")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
# clause breaks: commas (not one that groups a number's digits, "1,700"), semicolons, colons, spaced or long dashes, "but"
_CLAUSE = re.compile(r"(?<!\d),|,(?!\d{3}(?!\d))|[;:()]|\s[-\u2013\u2014]+\s|[\u2013\u2014]|\bbut\b")
_DIGIT_GROUP = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")   # "1,700 yuan" is 1700 yuan, not 1 and 700 yuan
NEGATIONS = frozenset("no not never without nothing none nobody neither nor zero".split())
NEGATION_WINDOW = 5      # a negation counts for a term among this many words before it ("won't need to link a bank card")
NEGATION_STOPS = frozenset("and so because if when then".split())   # ... not past these ("no deposit and it's free")
AUXILIARIES = frozenset("is are am was were do does did can could will would shall should may might must have has had s"
                        .split())   # "s": "what's"
QUESTION_WORDS = frozenset("how what why when where who whom whose which".split())
DEGREE_WORDS = frozenset("much many long often soon far".split())   # "how long does it last."
# who an auxiliary-first question asks about ("May I ...", "Is the credit ..."; not "Have a look in the app.")
SUBJECTS = frozenset("i you we it they he she there this that these those the your my our his her its their anyone"
                     .split())
PRONOUNS = frozenset("i you we it they he she".split())
SELF = frozenset("i me my we our us this".split())     # "this is Lin", "I'm calling from", "we are"
NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
                "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
                "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
                "million": 1000000}
# Units a number word must be followed by to count as a claimed quantity ("one minute", not "one question"): time,
# shares and money here; a domain's countable things ("ten books", "500 clicks") in its scenario's `rule_user.units`.
UNITS = frozenset("second minute hour day week month year time percent euro dollar yuan pound cent".split())
# Durations in seconds, so that "seven days" states "the first week" (a month and a year counted as 30 and 360 days)
DURATIONS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400, "month": 30 * 86400,
             "year": 360 * 86400}
ONE = frozenset("a an first".split())     # a fact's "for a month", "the first week": one of that unit
RATE_WORDS = frozenset("a an per each every".split())   # "four a month": how often, not four months


def stem(word: str) -> str:
    """Plural and third-person -s off, so that "days"/"day", "clicks"/"click" match."""
    return word[:-1] if len(word) >= 4 and word.endswith("s") and not word.endswith(("ss", "us", "is")) else word


def tokens(text: str) -> list[str]:
    """Lower-case word tokens, "n't" read as "not", hyphens as spaces ("700-yuan" -> 700 yuan) and a number's digits
    whole ("1,700" -> 1700)."""
    return _TOKEN.findall(re.sub(r"n['\u2019]t\b", " not", _DIGIT_GROUP.sub("", text.lower())))


def phrase(text: str) -> tuple[str, ...]:
    return tuple(stem(w) for w in tokens(text))


@dataclass(frozen=True)
class Clause:
    words: tuple[str, ...]          # tokens as written (lower case)
    stems: tuple[str, ...]
    question: bool                  # part of a question: asserts nothing
    text: str = ""                  # as written

    def find(self, term: tuple[str, ...]) -> list[int]:
        n = len(term)
        return [i for i in range(len(self.stems) - n + 1) if self.stems[i:i + n] == term] if n else []

    def negated_at(self, i: int) -> bool:
        start = max(0, i - NEGATION_WINDOW)
        before = self.words[start:i]
        stops = [j for j, w in enumerate(before) if w in NEGATION_STOPS]
        before = before[stops[-1] + 1:] if stops else before
        # "free of charge" negates too
        if any(w in NEGATIONS for w in before) or (i >= 2 and self.words[i - 2:i] == ("free", "of")):
            return True
        # ... and a negation reaches on through a list joined by "or" ("we don't ask for a deposit or your bank card")
        ors = [start + j for j, w in enumerate(self.words[start:i]) if w in ("or", "nor")]
        return bool(ors) and not stops and self.negated_at(ors[-1])

    def has(self, term: tuple[str, ...], negated: bool | None = None) -> bool:
        """The term occurs (negated or not, when asked)."""
        return any(negated is None or self.negated_at(i) == negated for i in self.find(term))


def _clause(text: str, question: bool) -> Clause:
    words = tokens(text)
    return Clause(tuple(words), tuple(stem(w) for w in words), question, text.strip())


def sentences_of(text: str) -> list[Clause]:
    """Each sentence whole (a clause of its own), questions marked."""
    out = []
    for sentence in _SENTENCE.findall(text or ""):
        words = tokens(sentence)
        if words:
            out.append(_clause(sentence, sentence.rstrip().endswith("?") or _shaped_like_a_question(words)))
    return out


def _shaped_like_a_question(words: Sequence[str]) -> bool:
    """A sentence without its question mark that still asks: an auxiliary and its subject first ("May I set it up
    now."; not "Don't just take my word for it.", "Have a look in the app."), or a question word with an auxiliary
    next ("How does it work.", "How long does it last.", "What card do you use."), not a statement that starts with
    one ("When the trial ends, nothing is billed.", "What you give is tax-deductible.")."""
    first, rest = words[0], list(words[1:4])
    if first in AUXILIARIES:
        return bool(rest) and rest[0] in SUBJECTS
    if first not in QUESTION_WORDS or not rest:
        return False
    if rest[0] in ("about", "not"):      # "how about I set it up for you.", "why not try it."
        return True
    if rest[0] in DEGREE_WORDS:
        rest = rest[1:]
    # a question word, at most one noun, then an auxiliary: "what card do you use.", "how many customers will I get."
    if len(rest) > 1 and first in ("what", "which", "how") and rest[0] not in PRONOUNS and rest[0] not in AUXILIARIES:
        rest = rest[1:]
    return bool(rest) and rest[0] in AUXILIARIES


def clauses_of(text: str) -> list[Clause]:
    return [part for sentence in sentences_of(text) for part in clauses_of_sentence(sentence)]


def clauses_of_sentence(sentence: Clause) -> list[Clause]:
    return [_clause(part, sentence.question) for part in _CLAUSE.split(sentence.text) if tokens(part)]


def number_words_at(words: Sequence[str], i: int) -> tuple[float, int]:
    """The number said in words from words[i] ("seven hundred": 700; "two thousand five hundred and ten": 2510) and
    the index after it (i: none there)."""
    total, current, j = 0.0, 0.0, i
    while j < len(words):
        if words[j] == "and" and j > i and words[j - 1] in ("hundred", "thousand", "million") \
                and j + 1 < len(words) and words[j + 1] in NUMBER_WORDS:   # "one hundred and twenty"
            j += 1
        if words[j] not in NUMBER_WORDS:
            break
        n = NUMBER_WORDS[words[j]]
        if n == 100:
            current = max(current, 1.0) * n
        elif n > 100:
            total, current = total + max(current, 1.0) * n, 0.0
        else:
            current += n
        j += 1
    return total + current, j


def numbers_in(text_or_clause: str | Clause, unnumbered: bool = False, units: frozenset[str] = UNITS
               ) -> list[tuple[float, str]]:
    """(value, the next word's stem) for every quantity: digits always, number words ("seven hundred") only
    before one of `units`; with `unnumbered` (a fact's own text), one of a duration named without a number ("within
    the first week"; not in a caller's turn, where "I do this every day" claims no quantity)."""
    words = text_or_clause.words if isinstance(text_or_clause, Clause) else tuple(tokens(text_or_clause))
    found, i = [], 0
    while i < len(words):
        if words[i].isdigit():
            found.append((float(words[i]), stem(words[i + 1]) if i + 1 < len(words) else ""))
            i += 1
            continue
        value, j = number_words_at(words, i)
        if j > i:   # the unit next, or after one word ("four new books"), but not a rate's ("four a month", "one per year")
            unit = "" if j < len(words) and words[j] in RATE_WORDS else \
                next((stem(w) for w in words[j:j + 2] if stem(w) in units), "")
            if unit:
                found.append((value, unit))
        elif unnumbered and words[i] in ONE and i + 1 < len(words) and stem(words[i + 1]) in DURATIONS and \
                not (i and (words[i - 1].isdigit() or stem(words[i - 1]) in units)):   # "10 euros a month" is a rate
            found.append((1.0, stem(words[i + 1])))
        i = max(j, i + 1)
    return found


_STOP = frozenset("""about after also been before being call could does from have here into just like make more
most much only other over same some than that their them then there these they this those through under very
want were what when where which while will with would your yours yes okay well really""".split())


def content_words(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in tokens(text) if (len(w) >= 4 or w.isdigit()) and w not in _STOP)


# three-letter words that say nothing of a fact's content ("app", "fee", "ads" do)
SHORT_FUNCTION_WORDS = frozenset("""the and you our for but not any can was are how who why its all get got has had his
her one two off out yes now too way own new few let yet nor per via did may see say""".split())


def word_keys(text: str) -> frozenset[str]:
    """The words of a text that carry content, three-letter ones too ("app", "fee"), cut to five letters ("cancel" /
    "cancelled"): what the rule user compares to tell whether a text uses a fact's or a scenario's words."""
    words = tokens(text)
    keys = set(content_words(text)) | {w for w in words if len(w) == 3 and w not in SHORT_FUNCTION_WORDS
                                        and not w.isdigit()}
    return frozenset(w[:5] for w in keys)
