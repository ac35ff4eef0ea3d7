"""Task prompts with checkable answers to mine the learned judge's labels on: the kinds of the
first built-in task set (now training/judge_excluded_prompts.jsonl: arithmetic, one-word
facts, yes/no, word tasks) with other numbers, places and words, never one of its prompts,
so that the judge is measured on prompts it was not trained on. Answers are `task_score`'s
kind=form specs.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

CAPITALS = [
    ("Portugal", "Lisbon"),
    ("Greece", "Athens"),
    ("Norway", "Oslo"),
    ("Sweden", "Stockholm"),
    ("Poland", "Warsaw"),
    ("Austria", "Vienna"),
    ("Ireland", "Dublin"),
    ("Canada", "Ottawa"),
    ("Australia", "Canberra"),
    ("China", "Beijing"),
    ("India", "Delhi"),
    ("Kenya", "Nairobi"),
    ("Peru", "Lima"),
    ("Argentina", "Aires"),
    ("Mexico", "Mexico"),
    ("Turkey", "Ankara"),
    ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"),
    ("Hungary", "Budapest"),
    ("Belgium", "Brussels"),
    ("Thailand", "Bangkok"),
    ("Cuba", "Havana"),
    ("Chile", "Santiago"),
    ("Iran", "Tehran"),
    ("Nigeria", "Abuja"),
    ("Vietnam", "Hanoi"),
    ("Scotland", "Edinburgh"),
    ("Wales", "Cardiff"),
    ("Brazil", "Brasilia|Brasília"),
    ("the Netherlands", "Amsterdam"),
]
FACTS = [
    ("What is the closest star to the Earth?", "sun"),
    ("What colour is snow?", "white"),
    ("What do cows drink?", "water"),
    ("Which animal says 'moo'?", "cow"),
    ("What is the hottest planet in the solar system?", "Venus"),
    ("What do you call a baby cat?", "kitten"),
    ("What do you call a baby dog?", "puppy"),
    ("Which organ pumps blood around the body?", "heart"),
    ("What is the largest mammal?", "whale"),
    ("What is the main language spoken in Brazil?", "Portuguese"),
    ("Which metal is liquid at room temperature?", "mercury"),
    ("What is the tallest animal?", "giraffe"),
    ("What is the boiling point of water in Celsius?", "100"),
    ("What do caterpillars turn into?", "butterflies|butterfly|moths|moth"),
    ("What colour is the sun?", "yellow|white"),
    ("Which season comes after winter?", "spring"),
    ("What is the largest continent?", "Asia"),
    ("What is the longest river in Africa?", "Nile"),
]
YES_NO = [
    ("Is water wet?", "yes"),
    ("Is the Earth round?", "yes"),
    ("Do birds have feathers?", "yes"),
    ("Is fire cold?", "no"),
    ("Can pigs fly?", "no"),
    ("Is London in France?", "no"),
    ("Is 10 greater than 3?", "yes"),
    ("Is 2 an odd number?", "no"),
    ("Do fish have fur?", "no"),
    ("Is the ocean salty?", "yes"),
    ("Is a whale a fish?", "no"),
    ("Is summer warm?", "yes"),
    ("Do trees have roots?", "yes"),
    ("Is the moon made of cheese?", "no"),
    ("Is Tokyo in Japan?", "yes"),
    ("Is ice made of water?", "yes"),
    ("Do snakes have legs?", "no"),
]
OPPOSITES = [
    ("fast", "slow"),
    ("light", "dark|heavy"),
    ("happy", "sad"),
    ("open", "closed|close|shut"),
    ("old", "new|young"),
    ("wet", "dry"),
    ("left", "right"),
    ("early", "late"),
    ("full", "empty"),
    ("rich", "poor"),
    ("strong", "weak"),
    ("high", "low"),
    ("win", "lose"),
    ("in", "out"),
]
PLURALS = [("child", "children"), ("foot", "feet"), ("tooth", "teeth"), ("goose", "geese"),
           ("man", "men"), ("woman", "women"), ("box", "boxes"), ("city", "cities")]  # fmt: skip
PAST = [("eat", "ate"), ("go", "went"), ("see", "saw"), ("swim", "swam"), ("write", "wrote"),
        ("sing", "sang"), ("drink", "drank"), ("take", "took")]  # fmt: skip
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]  # fmt: skip
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _row(prompt: str, kind: str, answer: object, task: str) -> dict[str, str]:
    return {"prompt": prompt, "task": task, "answer": f"{kind}={answer}"}


def judge_tasks(seed: int = 0, arithmetic: int = 120) -> list[dict[str, str]]:
    """The mining prompts, shuffled by `seed`: arithmetic with `arithmetic` random pairs, and
    every fact, yes/no and word question above; none is a built-in task-set prompt."""
    rng = random.Random(seed)
    rows = []
    for _ in range(arithmetic):
        a, b = rng.randint(2, 60), rng.randint(2, 40)
        op = rng.choice(("+", "minus", "times"))
        if op == "+":
            rows.append(_row(f"What is {a} + {b}? Answer with the number only.", "number",
                             a + b, "arithmetic"))  # fmt: skip
        elif op == "minus":
            a, b = max(a, b), min(a, b)
            rows.append(_row(f"What is {a} minus {b}? Answer with the number only.", "number",
                             a - b, "arithmetic"))  # fmt: skip
        else:
            a, b = rng.randint(2, 12), rng.randint(2, 12)
            rows.append(_row(f"What is {a} times {b}? Answer with just the number.", "number",
                             a * b, "arithmetic"))  # fmt: skip
    for country, city in CAPITALS:
        rows.append(_row(f"What is the capital of {country}? Answer in one word.", "word", city,
                         "facts"))  # fmt: skip
    for question, answer in FACTS:
        rows.append(_row(f"{question} Answer in one word.", "word", answer, "facts"))
    for question, answer in YES_NO:
        rows.append(_row(f"{question} Answer yes or no.", "yesno", answer, "yes/no"))
    for word, opposite in OPPOSITES:
        rows.append(_row(f"What is the opposite of '{word}'? One word.", "word", opposite,
                         "words"))  # fmt: skip
    for word, plural in PLURALS:
        rows.append(_row(f"What is the plural of '{word}'? One word.", "word", plural, "words"))
    for word, past in PAST:
        rows.append(_row(f"What is the past tense of '{word}'? One word.", "word", past,
                         "words"))  # fmt: skip
    for i, month in enumerate(MONTHS[:-1]):
        rows.append(_row(f"Which month comes after {month}? One word.", "word", MONTHS[i + 1],
                         "words"))  # fmt: skip
    for i, day in enumerate(DAYS[:-1]):
        rows.append(_row(f"What day comes before {DAYS[i + 1]}? One word.", "word", day,
                         "words"))  # fmt: skip
    built_in = set(_task_set_prompts())
    rows = [r for r in {r["prompt"]: r for r in rows}.values() if r["prompt"] not in built_in]
    rng.shuffle(rows)
    return rows


def _task_set_prompts() -> list[str]:
    path = Path(__file__).resolve().parent / "judge_excluded_prompts.jsonl"
    return [json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    tasks = judge_tasks()
    print(len(tasks))
    for t in tasks[:8]:
        print(t)
