"""The task set: several hundred prompts with checkable answers, made procedurally from a fixed
seed, in families the embedded verifier gets right often enough, and not so often, for a drop
in quality to show (`task_score` checks the answers, `quality` pairs them across settings).

A family is a generator of (prompt, answer) pairs: arithmetic from random operands, facts from
small tables in several phrasings. `task_set()` draws every family with one seed, tags each
prompt with its family, and splits it: every HELDOUT_EVERY-th prompt of a family is held out,
read only to confirm a tuned answer, never to tune. The shipped files
(`cactus_core/data/task_set_tune.jsonl` and `task_set_heldout.jsonl`) are `write_task_set()`'s
output; a test checks that they still are.

Families enter the set only if the verifier alone answers between MIN_ACCURACY and MAX_ACCURACY
of them (measured by `benchmarks/task_families.py`, recorded in `FAMILY_ACCURACY` and in
docs/rules.md): near 0 or 1 a family's answers cannot get worse, or better, by chance or by δ.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

SEED = 20261207
HELDOUT_EVERY = 4
MIN_ACCURACY, MAX_ACCURACY = 0.2, 0.8
DATA = Path(__file__).resolve().parents[2] / "data"
TUNE_FILE = DATA / "task_set_tune.jsonl"
HELDOUT_FILE = DATA / "task_set_heldout.jsonl"


@dataclass(frozen=True)
class TaskPrompt:
    prompt: str
    family: str
    answer: str  # task_score's kind=form

    def to_json(self) -> str:
        row = {"prompt": self.prompt, "task": self.family, "answer": self.answer}
        return json.dumps(row, ensure_ascii=False)


Family = Callable[[random.Random], Iterator[tuple[str, str]]]

_NUMBER_ONLY = ("Answer with the number only.", "Reply with just the number.")
_ONE_WORD = ("Answer in one word.", "Reply with one word.")


def sums(rng: random.Random) -> Iterator[tuple[str, str]]:
    for _ in range(80):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        yield f"What is {a} + {b}? {rng.choice(_NUMBER_ONLY)}", f"number={a + b}"


def differences(rng: random.Random) -> Iterator[tuple[str, str]]:
    for _ in range(80):
        a = rng.randint(20, 99)
        b = rng.randint(1, a - 1)
        yield f"What is {a} minus {b}? {rng.choice(_NUMBER_ONLY)}", f"number={a - b}"


def products(rng: random.Random) -> Iterator[tuple[str, str]]:
    pairs = [(a, b) for a in range(2, 13) for b in range(a, 13)]
    for a, b in rng.sample(pairs, 60):  # 60 of the 66 products, none asked twice
        a, b = (a, b) if rng.random() < 0.5 else (b, a)
        yield f"What is {a} times {b}? {rng.choice(_NUMBER_ONLY)}", f"number={a * b}"


def comparisons(rng: random.Random) -> Iterator[tuple[str, str]]:
    for _ in range(80):
        a, b = rng.sample(range(10, 1000), 2)
        if rng.random() < 0.5:
            yield (
                f"Which number is larger, {a} or {b}? {rng.choice(_NUMBER_ONLY)}",
                f"number={max(a, b)}",
            )
        else:
            yield (
                f"Which number is smaller, {a} or {b}? {rng.choice(_NUMBER_ONLY)}",
                f"number={min(a, b)}",
            )


def successors(rng: random.Random) -> Iterator[tuple[str, str]]:
    for _ in range(60):
        n = rng.randint(10, 999)
        after = rng.random() < 0.5
        where, answer = ("after", n + 1) if after else ("before", n - 1)
        yield f"What number comes right {where} {n}? {rng.choice(_NUMBER_ONLY)}", f"number={answer}"


_COUNTS = {
    "legs does a spider have": 8, "legs does a dog have": 4, "legs does a bird have": 2,
    "legs does an insect have": 6, "days are in a week": 7, "months are in a year": 12,
    "hours are in a day": 24, "minutes are in an hour": 60, "seconds are in a minute": 60,
    "sides does a triangle have": 3, "sides does a square have": 4,
    "sides does a pentagon have": 5, "sides does a hexagon have": 6,
    "sides does an octagon have": 8, "wheels does a bicycle have": 2,
    "wheels does a tricycle have": 3, "wheels does a car have": 4, "continents are there": 7,
    "planets are in the solar system": 8, "players are on a soccer team on the field": 11,
    "strings does a standard guitar have": 6, "strings does a violin have": 4,
    "days are in a leap year": 366, "days are in a normal year": 365,
    "weeks are in a year": 52, "fingers are on one hand": 5, "toes does a person have": 10,
    "cents are in a dollar": 100, "centimeters are in a meter": 100,
    "grams are in a kilogram": 1000, "meters are in a kilometer": 1000,
    "letters are in the English alphabet": 26, "eggs are in a dozen": 12,
    "years are in a century": 100, "years are in a decade": 10, "days are in September": 30,
    "days are in January": 31, "hearts does an octopus have": 3, "eyes does a person have": 2,
    "colors are in a rainbow": 7, "sides does a cube have": 6, "corners does a square have": 4,
    "minutes are in half an hour": 30, "hours are in a week": 168, "quarters make a dollar": 4,
    "keys are on a standard piano": 88, "squares are on a chessboard": 64,
    "cards are in a standard deck": 52, "bones are in the adult human body": 206,
    "teeth does an adult human usually have": 32,
}  # fmt: skip


def counting_facts(rng: random.Random) -> Iterator[tuple[str, str]]:
    for what, n in _COUNTS.items():
        yield f"How many {what}? {rng.choice(_NUMBER_ONLY)}", f"number={n}"


_CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid",
    "Japan": "Tokyo", "China": "Beijing", "Russia": "Moscow", "Egypt": "Cairo",
    "Canada": "Ottawa", "Australia": "Canberra", "Brazil": "Brasilia|Brasília",
    "Argentina": "Buenos Aires", "Mexico": "Mexico City", "India": "New Delhi|Delhi",
    "Greece": "Athens", "Portugal": "Lisbon", "Ireland": "Dublin", "Norway": "Oslo",
    "Sweden": "Stockholm", "Finland": "Helsinki", "Denmark": "Copenhagen", "Poland": "Warsaw",
    "Austria": "Vienna", "Hungary": "Budapest", "the Netherlands": "Amsterdam",
    "Belgium": "Brussels", "Switzerland": "Bern|Berne", "Turkey": "Ankara", "Iran": "Tehran",
    "Iraq": "Baghdad", "Kenya": "Nairobi", "Nigeria": "Abuja", "South Korea": "Seoul",
    "Thailand": "Bangkok", "Vietnam": "Hanoi", "Indonesia": "Jakarta", "Peru": "Lima",
    "Chile": "Santiago", "Colombia": "Bogota|Bogotá", "Cuba": "Havana", "Ukraine": "Kyiv|Kiev",
    "the Czech Republic": "Prague", "Romania": "Bucharest", "Scotland": "Edinburgh",
    "Wales": "Cardiff", "Israel": "Jerusalem", "Saudi Arabia": "Riyadh", "Pakistan": "Islamabad",
    "Afghanistan": "Kabul", "the Philippines": "Manila", "New Zealand": "Wellington",
    "Morocco": "Rabat", "Ethiopia": "Addis Ababa", "Venezuela": "Caracas", "Iceland": "Reykjavik",
    "Malaysia": "Kuala Lumpur", "Bangladesh": "Dhaka", "Nepal": "Kathmandu",
    "Croatia": "Zagreb", "Serbia": "Belgrade",
}  # fmt: skip


def capitals(rng: random.Random) -> Iterator[tuple[str, str]]:
    for country, city in _CAPITALS.items():
        yield f"What is the capital of {country}? {rng.choice(_ONE_WORD)}", f"word={city}"


_OPPOSITES = {
    "hot": "cold", "big": "small|little", "up": "down", "day": "night", "fast": "slow",
    "happy": "sad|unhappy", "light": "dark|heavy", "open": "closed|close|shut", "old": "new|young",
    "tall": "short", "rich": "poor", "hard": "soft|easy", "wet": "dry", "full": "empty",
    "early": "late", "loud": "quiet|soft|silent", "strong": "weak", "win": "lose",
    "begin": "end|finish", "buy": "sell", "push": "pull", "left": "right", "inside": "outside",
    "above": "below|beneath|under", "before": "after", "first": "last", "true": "false",
    "alive": "dead", "clean": "dirty", "friend": "enemy|foe", "good": "bad|evil",
    "high": "low", "love": "hate", "north": "south", "east": "west", "thick": "thin",
    "wide": "narrow", "young": "old", "start": "stop|finish|end", "always": "never",
    "asleep": "awake", "remember": "forget", "question": "answer", "arrive": "leave|depart",
    "increase": "decrease", "accept": "reject|refuse", "ancient": "modern|new",
    "cheap": "expensive|costly", "sweet": "sour|bitter", "smooth": "rough", "sharp": "dull|blunt",
    "brave": "cowardly|scared|afraid", "heavy": "light", "near": "far", "laugh": "cry",
    "summer": "winter", "entrance": "exit", "giant": "dwarf|tiny", "maximum": "minimum",
    "victory": "defeat", "polite": "rude", "noisy": "quiet|silent",
}  # fmt: skip


def opposites(rng: random.Random) -> Iterator[tuple[str, str]]:
    asks = ("What is the opposite of '{}'?", "What word means the opposite of '{}'?")
    for word, opposite in _OPPOSITES.items():
        yield f"{rng.choice(asks).format(word)} {rng.choice(_ONE_WORD)}", f"word={opposite}"


_YES_NO_FACTS = (
    ("Is the sun a star?", "yes"), ("Is the moon a planet?", "no"),
    ("Do fish live in water?", "yes"), ("Can penguins fly?", "no"), ("Is ice cold?", "yes"),
    ("Is fire cold?", "no"), ("Do cows lay eggs?", "no"), ("Do chickens lay eggs?", "yes"),
    ("Is Paris in France?", "yes"), ("Is Tokyo in China?", "no"), ("Is a whale a fish?", "no"),
    ("Is a dolphin a mammal?", "yes"), ("Is water wet?", "yes"), ("Is the sky green?", "no"),
    ("Does the sun rise in the east?", "yes"), ("Does the sun rise in the west?", "no"),
    ("Is a spider an insect?", "no"), ("Is a bee an insect?", "yes"),
    ("Are there seven days in a week?", "yes"), ("Are there ten months in a year?", "no"),
    ("Is gold a metal?", "yes"), ("Is wood a metal?", "no"), ("Can a car fly?", "no"),
    ("Do plants need sunlight?", "yes"), ("Is the Earth flat?", "no"),
    ("Is the Earth round?", "yes"), ("Do snakes have legs?", "no"), ("Do birds have wings?", "yes"),
    ("Is a tomato a fruit in botany?", "yes"), ("Is salt sweet?", "no"),
    ("Is sugar sweet?", "yes"), ("Is Mount Everest the tallest mountain on Earth?", "yes"),
    ("Is the Pacific the largest ocean?", "yes"), ("Is the Atlantic the largest ocean?", "no"),
    ("Does ice melt when it is heated?", "yes"), ("Does water boil at 10 degrees Celsius?", "no"),
    ("Is a triangle a shape with four sides?", "no"),
    ("Is a square a shape with four sides?", "yes"),
    ("Do humans have two lungs?", "yes"), ("Do humans have three hearts?", "no"),
    ("Is English a language?", "yes"), ("Is Jupiter a star?", "no"),
    ("Is Jupiter bigger than the Earth?", "yes"), ("Is the moon bigger than the Earth?", "no"),
    ("Do bats sleep during the day?", "yes"), ("Is a carrot a vegetable?", "yes"),
    ("Is a potato a fruit?", "no"), ("Do cats bark?", "no"), ("Do dogs bark?", "yes"),
    ("Is snow white?", "yes"), ("Is coal white?", "no"), ("Is Africa a continent?", "yes"),
    ("Is Canada a continent?", "no"), ("Can humans breathe underwater without help?", "no"),
)  # fmt: skip


def yes_no_facts(rng: random.Random) -> Iterator[tuple[str, str]]:
    for question, answer in _YES_NO_FACTS:
        yield f"{question} Answer yes or no.", f"yesno={answer}"


def yes_no_numbers(rng: random.Random) -> Iterator[tuple[str, str]]:
    for _ in range(60):
        a, b = rng.sample(range(10, 1000), 2)
        word = rng.choice(("greater", "less"))
        truth = a > b if word == "greater" else a < b
        yield f"Is {a} {word} than {b}? Answer yes or no.", f"yesno={'yes' if truth else 'no'}"


_WORDS = (
    "apple",
    "banana",
    "cherry",
    "garden",
    "window",
    "pencil",
    "rabbit",
    "orange",
    "silver",
    "yellow",
    "castle",
    "dragon",
    "forest",
    "guitar",
    "hammer",
    "island",
    "jacket",
    "kitten",
    "lemon",
    "marble",
    "needle",
    "ocean",
    "planet",
    "quilt",
    "river",
    "summer",
    "tiger",
    "umbrella",
    "violin",
    "wagon",
    "zebra",
    "basket",
    "candle",
    "doctor",
    "engine",
    "flower",
    "ginger",
    "harbor",
    "igloo",
    "jungle",
    "ladder",
    "mirror",
    "number",
    "octopus",
    "pepper",
    "rocket",
    "saddle",
    "tomato",
    "valley",
    "walnut",
    "anchor",
    "bottle",
    "cookie",
    "desert",
)


def letters(rng: random.Random) -> Iterator[tuple[str, str]]:
    for word in _WORDS:
        if rng.random() < 0.5:
            yield (
                f"What is the first letter of the word '{word}'? Answer with the letter only.",
                f"word={word[0]}",
            )
        else:
            yield (
                f"What is the last letter of the word '{word}'? Answer with the letter only.",
                f"word={word[-1]}",
            )


# Every family measured; FAMILIES keeps those inside [MIN_ACCURACY, MAX_ACCURACY].
CANDIDATES: dict[str, Family] = {
    "sums": sums,
    "differences": differences,
    "products": products,
    "comparisons": comparisons,
    "successors": successors,
    "counting facts": counting_facts,
    "capitals": capitals,
    "opposites": opposites,
    "yes-no facts": yes_no_facts,
    "yes-no numbers": yes_no_numbers,
    "letters": letters,
}

# The verifier alone (T 0.7, top-p 1.0, 48 new tokens) on every candidate prompt:
# `benchmarks/task_families.py` measures it; docs/rules.md has the table with intervals.
FAMILY_ACCURACY: dict[str, float] = {
    "sums": 0.087,
    "differences": 0.05,
    "products": 0.433,
    "comparisons": 0.375,
    "successors": 0.017,
    "counting facts": 0.16,
    "capitals": 0.45,
    "opposites": 0.355,
    "yes-no facts": 0.37,
    "yes-no numbers": 0.433,
    "letters": 0.352,
}
FAMILIES: tuple[str, ...] = tuple(
    name for name, acc in FAMILY_ACCURACY.items() if MIN_ACCURACY <= acc <= MAX_ACCURACY
)


def draw(families: tuple[str, ...] | list[str], seed: int = SEED) -> list[TaskPrompt]:
    """Every prompt of the named families, each family from its own stream of `seed`; a
    question drawn again (the instruction after it aside) is left out, so that no question
    sits in both splits."""
    out: list[TaskPrompt] = []
    seen: set[str] = set()
    for name in families:
        rng = random.Random(f"{seed}:{name}")
        for prompt, answer in CANDIDATES[name](rng):
            question = prompt.split("?")[0]
            if question not in seen:
                seen.add(question)
                out.append(TaskPrompt(prompt, name, answer))
    return out


def task_set(seed: int = SEED) -> tuple[list[TaskPrompt], list[TaskPrompt]]:
    """(tune, held out): the kept families' prompts, every HELDOUT_EVERY-th of each family
    held out."""
    tune: list[TaskPrompt] = []
    heldout: list[TaskPrompt] = []
    for name in FAMILIES:
        for i, row in enumerate(draw([name], seed)):
            (heldout if i % HELDOUT_EVERY == HELDOUT_EVERY - 1 else tune).append(row)
    # Interleave the families so that the first N prompts of a file cover all of them.
    return _interleave(tune), _interleave(heldout)


def _interleave(rows: list[TaskPrompt]) -> list[TaskPrompt]:
    by_family: dict[str, list[TaskPrompt]] = {}
    for row in rows:
        by_family.setdefault(row.family, []).append(row)
    out: list[TaskPrompt] = []
    queues = list(by_family.values())
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def lines(rows: list[TaskPrompt]) -> str:
    return "".join(row.to_json() + "\n" for row in rows)


def write_task_set(tune_file: Path = TUNE_FILE, heldout_file: Path = HELDOUT_FILE) -> None:
    tune, heldout = task_set()
    tune_file.write_text(lines(tune), encoding="utf-8")
    heldout_file.write_text(lines(heldout), encoding="utf-8")


if __name__ == "__main__":
    write_task_set()
    tune, heldout = task_set()
    print(f"{len(tune)} tuning and {len(heldout)} held-out prompts in {len(FAMILIES)} families")
