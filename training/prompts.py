"""Training prompts for the embedded draft: templates x topics, disjoint from the benchmark set.

The benchmark prompts (cactus_core/data/chat_prompts.jsonl) are what docs/benchmarks.md is
measured on, so no training prompt may equal one of them, and topics that appear in them are
left out here so the draft is not tuned to their exact answers.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

EXPLAIN_TOPICS = [
    "volcanoes",
    "tides",
    "black holes",
    "the water cycle",
    "vaccines",
    "inflation",
    "compound interest",
    "the stock market",
    "earthquakes",
    "gravity",
    "magnetism",
    "electricity",
    "DNA",
    "evolution",
    "the immune system",
    "plate tectonics",
    "the moon's phases",
    "seasons on Earth",
    "solar panels",
    "wind turbines",
    "nuclear fusion",
    "batteries",
    "the internet",
    "email",
    "encryption",
    "blockchain",
    "GPS",
    "radio waves",
    "microwaves",
    "refrigerators",
    "airplanes flying",
    "bicycles staying upright",
    "sound",
    "echoes",
    "thunderstorms",
    "snowflakes",
    "hurricanes",
    "coral reefs",
    "bees making honey",
    "bird migration",
    "sleep",
    "dreams",
    "memory",
    "muscles growing",
    "digestion",
    "the heart",
    "the lungs",
    "blood types",
    "antibiotics",
    "fermentation",
    "bread rising",
    "coffee",
    "tea",
    "chocolate making",
    "recycling",
    "composting",
    "democracy",
    "supply and demand",
    "taxes",
    "banks",
    "credit scores",
    "the Roman Empire",
    "the printing press",
    "the industrial revolution",
    "the pyramids",
    "the Olympic Games",
    "chess openings",
    "jazz music",
    "impressionist painting",
    "the Renaissance",
    "operating systems",
    "compilers",
    "databases",
    "cloud computing",
    "machine learning",
    "recursion",
    "hash tables",
    "sorting algorithms",
    "version control with git",
    "HTTP requests",
    "cookies in web browsers",
    "password managers",
    "spreadsheets",
    "probability",
    "prime numbers",
    "fractions",
    "percentages",
    "negative numbers",
    "the number pi",
    "derivatives in calculus",
    "statistics averages",
    "vectors",
    "time zones",
    "leap years",
    "maps and projections",
    "glaciers",
    "deserts",
    "rainforests",
]

CODE_TASKS = [
    "reverses a string",
    "counts the vowels in a sentence",
    "finds the largest number in a list",
    "computes the factorial of a number",
    "returns the nth Fibonacci number",
    "checks whether a number is prime",
    "removes duplicates from a list",
    "sorts a list of dictionaries by a key",
    "merges two sorted lists",
    "counts word frequencies in a text",
    "converts Celsius to Fahrenheit",
    "reads a CSV file and prints each row",
    "finds the second smallest element of a list",
    "flattens a nested list",
    "checks whether two strings are anagrams",
    "computes the average of a list of numbers",
    "implements binary search",
    "generates a random password",
    "validates an email address with a regular expression",
    "capitalizes the first letter of every word",
    "computes the greatest common divisor",
    "rotates a list by k positions",
    "finds all even numbers in a range",
    "transposes a matrix",
    "implements a simple stack class",
    "implements a queue",
    "counts lines in a file",
    "converts a number to binary",
    "sums the digits of a number",
    "finds the longest word in a sentence",
    "implements bubble sort",
    "implements quicksort",
]
LANGUAGES = ["Python", "JavaScript", "Python", "Java", "C", "Rust", "Go", "Python"]

LIST_SUBJECTS = [
    "ways to save money",
    "healthy breakfast ideas",
    "habits of productive people",
    "books every teenager should read",
    "ways to reduce stress",
    "indoor plants that are easy",
    "things to do in Paris",
    "board games for families",
    "ways to learn a new language",
    "exercises you can do at home",
    "reasons to learn programming",
    "tips for public speaking",
    "ideas for a birthday party",
    "ways to be more environmentally friendly",
    "skills every adult should have",
    "questions to ask in a job interview",
    "snacks for a road trip",
    "hobbies to try this year",
    "ways to make new friends",
    "tips for studying for exams",
    "things to check before buying a used car",
    "ways to improve your writing",
    "benefits of drinking water",
    "famous inventions",
    "dog breeds for apartments",
    "tips for a first-time gardener",
    "ways to stay focused",
    "kitchen tools every cook needs",
    "classic movies",
    "tips for running a marathon",
]

STORY_SUBJECTS = [
    "a dragon who is afraid of fire",
    "a girl who finds a map in the attic",
    "a lighthouse keeper",
    "a talking tree",
    "an astronaut lost on Mars",
    "a detective solving a mystery in a small town",
    "a wizard who forgot his spells",
    "two friends on a sailing trip",
    "a lonely whale",
    "a time traveller in ancient Egypt",
    "a baker who bakes magic bread",
    "a dog who wants to fly",
    "a knight and a clever fox",
    "a child's first day at school",
    "a haunted library",
    "a penguin who moves to the city",
    "an old clockmaker",
    "a secret garden",
    "a mouse in a museum",
    "a storm at sea",
    "a village with no music",
    "a boy who can talk to birds",
    "the last bookshop on Earth",
]
POEM_FORMS = ["a short poem", "a haiku", "a limerick", "a four-line rhyme", "a poem"]
POEM_SUBJECTS = [
    "the ocean",
    "a winter morning",
    "friendship",
    "the city at night",
    "a cup of coffee",
    "the stars",
    "spring flowers",
    "a sleepy dog",
    "mountains",
    "the rain",
    "a train journey",
    "the sun rising",
    "a forgotten key",
    "homework",
    "the wind",
    "an old house",
]

ADVICE = [
    "I can't stop procrastinating. How can I get my work done?",
    "How can I become more confident when talking to new people?",
    "What is a good way to start exercising if I have never done it?",
    "How should I prepare for a long flight?",
    "My friend is upset with me. How can I fix things?",
    "How do I start learning to play the guitar?",
    "How can I keep my houseplants alive?",
    "What should I consider when choosing a laptop?",
    "How can I manage my time better at university?",
    "How do I ask for a raise at work?",
    "How can I stop checking my phone so often?",
    "What are good ways to deal with a noisy neighbour?",
    "How can I eat healthier on a small budget?",
    "How do I write a good CV?",
    "How can I help my child enjoy reading?",
    "What should I do if I feel lonely after moving to a new city?",
    "How can I prepare for a presentation at work?",
    "How do I choose a good password?",
    "How can I learn to cook simple meals?",
    "How should I plan a budget for a holiday?",
]

MATH_TEMPLATES = [
    "What is {a} plus {b}?",
    "What is {a} times {c}? Explain step by step.",
    "What is {a} minus {b}?",
    "If I have {c} boxes with {d} apples each, how many apples do I have?",
    "A shop sells pens for {d} dollars each. How much do {c} pens cost?",
    "What is {d} percent of {a}?",
    "Solve for x: {c}x + {d} = {b}.",
    "A car drives {a} kilometres in {d} hours. What is its average speed?",
    "What is the area of a rectangle that is {c} metres by {d} metres?",
    "What is the perimeter of a square with side {c} centimetres?",
    "Is {a} a prime number? Explain.",
    "What is the square root of {sq}?",
    "Convert {a} minutes into hours and minutes.",
    "What is {c}/{d} as a decimal?",
]

EXPLAIN_TEMPLATES = [
    "Explain {t} in simple terms.",
    "How do {t} work?",
    "What is the science behind {t}?",
    "Can you explain {t} to a beginner?",
    "Give me a short explanation of {t}.",
    "What are the most important facts about {t}?",
    "Why are {t} important?",
    "Explain {t} to a ten-year-old.",
    "What should everyone know about {t}?",
    "Write a short paragraph about {t}.",
]
CODE_TEMPLATES = [
    "Write a {lang} function that {task}.",
    "How do I write code in {lang} that {task}? Show an example.",
    "Show me a {lang} program that {task}, with comments.",
    "Write a function that {task} and explain it.",
]
LIST_TEMPLATES = [
    "List {n} {s}.",
    "Give me {n} {s}.",
    "What are some {s}?",
    "Can you suggest {n} {s}?",
]
STORY_TEMPLATES = [
    "Write a short story about {s}.",
    "Tell me a bedtime story about {s}.",
    "Write the opening paragraph of a story about {s}.",
    "Write a funny story about {s}.",
]
MISC = [
    "What is the capital of {c}?",
    "Tell me three facts about {c}.",
    "What food is {c} famous for?",
    "What is the weather like in {c}?",
]
COUNTRIES = [
    "France",
    "Japan",
    "Brazil",
    "Canada",
    "Kenya",
    "Australia",
    "India",
    "Mexico",
    "Norway",
    "Egypt",
    "Italy",
    "Peru",
    "Vietnam",
    "Germany",
    "Spain",
    "Chile",
    "Greece",
    "Thailand",
]
COMPARE = [
    ("cats", "dogs"),
    ("tea", "coffee"),
    ("Python", "JavaScript"),
    ("trains", "planes"),
    ("renting", "buying a home"),
    ("e-books", "paper books"),
    ("summer", "winter"),
    ("SQL", "NoSQL databases"),
    ("running", "swimming"),
    ("city life", "country life"),
    ("weather", "climate"),
    ("viruses", "bacteria"),
    ("RAM", "storage"),
    ("a CPU", "a GPU"),
]


# Families added for the later feature-draft rounds (`--extra-prompts`): kinds of request the
# first prompt list lacked (messages, recipes, plots, trade-offs, how-tos, concepts, plans).
# Each entry: templates, then the fillers; a prompt takes 2 templates per filler.
EXTRA_FAMILIES: list[tuple[list[str], list[str]]] = [
    (
        [
            "Write a polite email {x}.",
            "Draft a short, friendly message {x}.",
            "Help me write a note {x}.",
        ],
        [
            "to my landlord about a broken heater",
            "thanking a colleague for their help on a project",
            "declining an invitation to a meeting",
            "asking a teacher for more time on an assignment",
            "to a customer apologising for a late delivery",
            "inviting the neighbours to a barbecue",
            "asking a shop for a refund for a faulty kettle",
            "congratulating a friend on a new job",
            "asking a professor for a meeting",
            "reminding my team about a deadline on Monday",
            "to a hotel asking about late check-in",
            "welcoming a new member to our book club",
        ],
    ),
    (
        [
            "Give me an easy recipe for {x}.",
            "How do I make {x} at home?",
            "What ingredients do I need for {x}, and what are the steps?",
        ],
        [
            "an omelette",
            "tomato soup",
            "banana bread",
            "guacamole",
            "fried rice",
            "lemonade",
            "chocolate chip cookies",
            "hummus",
            "spaghetti bolognese",
            "porridge",
            "a fruit smoothie",
            "vegetable curry",
        ],
    ),
    (
        [
            "Summarise the story of {x} in a few sentences.",
            "What is {x} about?",
            "Who are the main characters in {x}, and what happens to them?",
        ],
        [
            "Hamlet",
            "Cinderella",
            "The Odyssey",
            "Frankenstein",
            "Pride and Prejudice",
            "Moby-Dick",
            "Little Red Riding Hood",
            "The Wizard of Oz",
            "Alice in Wonderland",
            "A Christmas Carol",
            "Macbeth",
            "Treasure Island",
        ],
    ),
    (
        [
            "What are the advantages and disadvantages of {x}?",
            "Give me a balanced view of {x}.",
            "Is {x} a good idea? List the arguments on both sides.",
        ],
        [
            "electric cars",
            "social media for teenagers",
            "online learning",
            "living abroad",
            "owning a dog",
            "nuclear power",
            "a four-day work week",
            "public transport",
            "homeschooling",
            "credit cards",
            "open-plan offices",
            "self-driving cars",
        ],
    ),
    (
        [
            "How do I {x}?",
            "What is the best way to {x}?",
            "Give me step-by-step instructions to {x}.",
        ],
        [
            "change a flat tyre on a bicycle",
            "start a small vegetable garden",
            "learn a new language quickly",
            "save money on groceries",
            "prepare for my first marathon",
            "make a monthly budget",
            "clean a laptop keyboard",
            "train a puppy to sit",
            "brew a good cup of coffee",
            "back up the photos on my phone",
            "paint a room",
            "memorise a speech",
        ],
    ),
    (
        [
            "Explain what {x} is in one paragraph.",
            "What is {x}, and why is it useful?",
            "Explain {x} with a simple example.",
        ],
        [
            "recursion",
            "a hash table",
            "an API",
            "a compiler",
            "a database index",
            "object-oriented programming",
            "a queue in programming",
            "version control",
            "cloud computing",
            "machine learning",
            "a web browser's cache",
            "an operating system",
        ],
    ),
    (
        [
            "Plan a one-day visit to {x} for a first-time tourist.",
            "What are the best things to see in {x}?",
            "I have a weekend in {x}. What should I do?",
        ],
        [
            "Paris",
            "Tokyo",
            "Rome",
            "New York",
            "London",
            "Barcelona",
            "Istanbul",
            "Sydney",
            "Cairo",
            "Amsterdam",
            "Lisbon",
            "Seoul",
        ],
    ),
]


def generate_prompts(seed: int = 0, extra: bool = False) -> list[str]:
    """The training prompts, shuffled by `seed`; `extra` adds `EXTRA_FAMILIES` (2 templates per
    filler). seed 0 without extra is the list the shipped rounds were generated from."""
    rng = random.Random(seed)
    out: list[str] = []
    for t in EXPLAIN_TOPICS:
        for tpl in rng.sample(EXPLAIN_TEMPLATES, 3):
            out.append(tpl.format(t=t))
    for task in CODE_TASKS:
        for lang in rng.sample(LANGUAGES, 3):
            out.append(rng.choice(CODE_TEMPLATES).format(lang=lang, task=task))
    for s in LIST_SUBJECTS:
        for tpl in rng.sample(LIST_TEMPLATES, 3):
            out.append(tpl.format(n=rng.choice([3, 4, 5, 6, 7, 10]), s=s))
    for s in STORY_SUBJECTS:
        for tpl in rng.sample(STORY_TEMPLATES, 3):
            out.append(tpl.format(s=s))
    for s in POEM_SUBJECTS:
        for form in rng.sample(POEM_FORMS, 2):
            out.append(f"Write {form} about {s}.")
    out.extend(ADVICE)
    for _ in range(150):
        a, b = rng.randint(11, 999), rng.randint(11, 999)
        c, d = rng.randint(2, 19), rng.randint(2, 12)
        sq = rng.randint(2, 30) ** 2
        out.append(rng.choice(MATH_TEMPLATES).format(a=a, b=b, c=c, d=d, sq=sq))
    for c in COUNTRIES:
        for tpl in rng.sample(MISC, 2):
            out.append(tpl.format(c=c))
    for x, y in COMPARE:
        out.append(f"What is the difference between {x} and {y}?")
        out.append(f"Compare {x} and {y}: which is better and why?")
    if extra:
        for templates, fillers in EXTRA_FAMILIES:
            for x in fillers:
                for tpl in rng.sample(templates, 2):
                    out.append(tpl.format(x=x))
    bench = set(_benchmark_prompts())
    out = [p for p in dict.fromkeys(out) if p not in bench]
    rng.shuffle(out)
    return out


def _benchmark_prompts() -> list[str]:
    path = Path(__file__).resolve().parents[1] / "cactus_core" / "data" / "chat_prompts.jsonl"
    return [json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()]


def heldout_prompts() -> list[str]:
    """The draft's own held-out prompts (training/heldout_prompts.jsonl, written apart from
    every generator here): measured on, never trained on. The trainer drops any answer to one
    of them that a generator happened to produce."""
    path = Path(__file__).resolve().parent / "heldout_prompts.jsonl"
    return [json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    prompts = generate_prompts()
    print(len(prompts))
    for p in prompts[:15]:
        print(p)
