"""A wide, varied set of English chat prompts for collecting draft-model training data.

`training/prompts.py` is narrow: a handful of request kinds (explain a topic, write code, list,
story, poem, a few extras), each with one fixed filler set. The draft is trained on what the
verifier (SmolLM2-135M-Instruct) answers, so a broader prompt mix gives it a broader picture of
how the verifier writes. This module adds many new families of everyday requests -- questions,
how-tos, advice with personal context, comparisons, definitions, trivia, planning, opinions,
role-play, dialogues, letters, product copy, jokes, riddles, coding in several languages -- and
procedural ones (word problems and conversions with random numbers, tasks over short given
texts, extraction and classification), with mostly new topics and mixed prompt styles (terse,
long with context, with format instructions, casual).

`wide_prompts(seed)` keeps the families' content fixed and lets the seed choose the phrasings,
filler pairings, numbers and style add-ons, so different seeds give largely different lists.
Benchmark prompts (`cactus_core/data/chat_prompts.jsonl`) are never returned, and prompts that
touch the benchmark's exact topics are filtered out by `_AVOID`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from training.prompts import _benchmark_prompts


def _lines(block: str) -> list[str]:
    """The non-blank, stripped lines of a text block (one filler per line)."""
    return [line.strip() for line in block.strip().splitlines() if line.strip()]


def _pairs(block: str) -> list[tuple[str, str]]:
    """Lines of the form `left | right` as pairs."""
    out = []
    for line in _lines(block):
        left, right = line.split(" | ")
        out.append((left.strip(), right.strip()))
    return out


@dataclass(frozen=True)
class Family:
    """Templates use `{x}` (or `{a}`/`{b}` when the fillers are pairs); each filler is combined
    with `k` templates drawn per seed. `styled` families may get a format instruction or a
    casual opener added (see `_stylise`)."""

    name: str
    templates: list[str]
    fillers: list[str] | list[tuple[str, str]]
    k: int = 2
    styled: bool = False


# Substrings of the benchmark prompts' topics; a generated prompt containing one is dropped.
_AVOID = [
    "cacti",
    "cactus",
    "rainbow",
    "palindrome",
    "better sleep",
    "sleep tips",
    "robot who learns to paint",
    "job interview",
    "17 multiplied by 23",
    "17 x 23",
    "17 times 23",
    "list and a tuple",
    "pancake",
    "sky blue",
    "sky is blue",
    "autumn leaves",
    "climate change",
    "romeo",
    "linked list",
    "rainy weekend",
    "pythagor",
    "day off",
    "photosynthesis",
    "working from home",
    "work from home",
    "binary",
    "limerick about a cat",
    "train travels",
    "hiking trip",
    "neural network",
]

# ----------------------------------------------------------------------------------------------
# Style add-ons for `styled` families.

FORMAT_SUFFIXES = _lines("""
    Answer in three bullet points.
    Keep it under 50 words.
    Please keep it short.
    One paragraph is enough.
    Explain it like I'm a complete beginner.
    Give me the short version first, then a bit more detail.
    Use simple words.
    Answer in two or three sentences.
    Put the main points in a numbered list.
    No jargon, please.
    Be concise.
    A quick answer is fine.
    Include one concrete example.
    End with a one-line summary.
    Keep it friendly and practical.
""")

CASUAL_OPENERS = _lines("""
    hey,
    quick question:
    ok so
    hi there!
    random question, but
    sorry if this is a silly question, but
    hello!
    so I was wondering,
    can I ask you something?
""")

# Words after which a casual opener may lower-case the prompt's first letter.
_LOWERABLE = {
    "What",
    "How",
    "Why",
    "Can",
    "Could",
    "Is",
    "Are",
    "Do",
    "Does",
    "Give",
    "Tell",
    "Write",
    "Explain",
    "List",
    "Suggest",
    "Should",
    "Which",
    "Who",
    "When",
    "Where",
    "Help",
    "Make",
    "Plan",
    "Describe",
    "Any",
    "Would",
    "Was",
    "Did",
}


def _stylise(rng: random.Random, prompt: str) -> str:
    r = rng.random()
    if r < 0.22:
        return f"{prompt} {rng.choice(FORMAT_SUFFIXES)}"
    if r < 0.32:
        first = prompt.split(" ", 1)[0]
        body = prompt[0].lower() + prompt[1:] if first in _LOWERABLE else prompt
        return f"{rng.choice(CASUAL_OPENERS)} {body}"
    return prompt


# ----------------------------------------------------------------------------------------------
# Template families: fixed content, the seed picks the phrasings.

FAMILIES: list[Family] = [
    Family(
        "everyday_why",
        [
            "Why is it that {x}?",
            "Can you explain why {x}?",
            "My kid asked me why {x} and I had no idea. Can you help?",
            "In two or three sentences, explain why {x}.",
            "What's the reason {x}?",
            "I've always wondered why {x}. What's the explanation?",
        ],
        _lines("""
            ice floats on water
            bread goes stale
            onions make you cry
            cats purr
            we get goosebumps
            fingers wrinkle in the bath
            metal feels colder than wood
            popcorn pops
            bananas get brown spots
            the sea is salty
            we yawn
            bubbles are round
            a spoon looks bent in a glass of water
            hair turns grey
            we get hiccups
            the moon looks bigger near the horizon
            soap removes grease
            some people are left-handed
            apples turn brown after you cut them
            our voices sound different on recordings
            planes leave white trails in the sky
            salt melts ice on roads
            dogs wag their tails
            we feel dizzy after spinning
            stars twinkle
            a bruise changes colour
            cold drinks get wet on the outside
            milk goes sour
            the wind feels colder on a bike
            boats float even though they are heavy
            we have fingerprints
            owls can turn their heads so far
            a kettle makes noise before it boils
            glass is transparent
            we dream
            chillies taste hot
        """),
        styled=True,
    ),
    Family(
        "how_things_work",
        [
            "How does {x} work?",
            "Explain how {x} works in plain English.",
            "What's going on inside {x}?",
            "Can you describe, step by step, how {x} works?",
            "I use {x} every day but have no idea how it works. Explain?",
        ],
        _lines("""
            a zipper
            a lock and key
            a thermostat
            a toaster
            a touchscreen
            a barcode scanner
            noise-cancelling headphones
            an elevator
            a smoke detector
            a QR code
            a vending machine
            a contactless bank card
            a 3D printer
            an electric kettle
            a traffic light
            a dishwasher
            a pressure cooker
            an induction hob
            a hot air balloon
            a submarine
            a parachute
            a camera lens
            a thermometer
            a compass
            a pendulum clock
            a washing machine
            Wi-Fi
            a heat pump
            Bluetooth
            a car engine
            a fountain pen
            a solar-powered calculator
            a microphone
            a lightning rod
            a water filter
            an escalator
            a fire extinguisher
            a smartwatch step counter
        """),
        styled=True,
    ),
    Family(
        "history",
        [
            "What happened during {x}?",
            "Give me a short overview of {x}.",
            "Why was {x} important?",
            "Explain {x} like I'm a high-school student.",
            "Summarise {x} in three bullet points.",
            "What were the main causes and effects of {x}?",
        ],
        _lines("""
            the fall of the Berlin Wall
            the invention of the telephone
            the first Moon landing
            the building of the Great Wall of China
            the Black Death
            the French Revolution
            the Silk Road
            the Wright brothers' first flight
            the discovery of penicillin
            the signing of the Magna Carta
            the voyages of the Vikings
            the Gold Rush in California
            the end of apartheid in South Africa
            the invention of the light bulb
            the construction of the Panama Canal
            the Cold War
            the age of exploration
            the abolition of slavery in the British Empire
            the sinking of the Titanic
            the first Olympic Games of the modern era
            the rise of the Mongol Empire
            the women's suffrage movement
            the Apollo 13 mission
            the invention of the World Wide Web
            the building of the Egyptian pyramids at Giza
            the Aztec capital Tenochtitlan
            the eruption of Vesuvius in 79 AD
            the Meiji Restoration in Japan
        """),
    ),
    Family(
        "household_howto",
        [
            "How do I {x}?",
            "What's the easiest way to {x}?",
            "Give me step-by-step instructions to {x}.",
            "I've never done this before: how do I {x}?",
            "Any tips on how to {x}?",
            "What do I need to {x}, and how do I do it?",
        ],
        _lines("""
            get a red wine stain out of a carpet
            unclog a bathroom sink
            hang a picture straight
            sharpen a kitchen knife
            iron a shirt without creases
            defrost a freezer
            get rid of fruit flies in the kitchen
            fix a squeaky door hinge
            clean a burnt pan
            remove a sticker without leaving residue
            sew a button back on
            wash a wool jumper without shrinking it
            descale a kettle
            fold a fitted sheet
            clean the inside of a microwave
            stop a dripping tap
            get chewing gum off clothes
            reset a tripped circuit breaker
            bleed a radiator
            clean mould off a shower curtain
            organise a messy wardrobe
            keep cut flowers fresh longer
            remove limescale from a shower head
            patch a small hole in a wall
            wrap a present neatly
            polish leather shoes
            get the smell out of a fridge
            tie a tie
            store fresh herbs so they last
            pack a suitcase efficiently
        """),
        styled=True,
    ),
    Family(
        "persona_advice",
        [
            "I'm {x}. Any advice?",
            "Here's my situation: I'm {x}. What would you suggest?",
            "I'm {x}. Can you give me three practical tips?",
            "Honest advice needed. I'm {x}. Where should I start?",
            "I'm {x}. I feel a bit stuck. What small changes could help?",
        ],
        _lines("""
            a nurse working night shifts and I struggle to eat well on my breaks
            a first-year university student and I keep running out of money before the month ends
            a retired teacher who wants to stay active and meet new people
            a single dad of two and our mornings before school are chaos
            a software developer and my back hurts after long days at the desk
            starting my first full-time job next week and I want to make a good impression
            a shop owner and I want more local people to know about my shop
            learning to drive and I get nervous on busy roads
            moving into a tiny flat and I have far too much stuff
            training for a 10 km run but I keep losing motivation
            a new manager and one of my team keeps missing deadlines
            a parent of a teenager who barely talks to me any more
            an introvert and I have to go to a big networking event
            a musician trying to practise regularly while working full time
            a student with three exams in one week and I don't know how to split my time
            a freelancer and clients often pay me late
            caring for my elderly mother and I'm worn out
            new to a city where I don't know anyone
            trying to cut down on sugar but I love desserts
            a vegetarian cooking for meat-loving relatives this weekend
            a teacher with a class that gets restless after lunch
            saving for a house and it feels like it will take forever
            a gamer who wants to spend less time on screens
            a small charity volunteer and we need more volunteers
            planning to change careers at 40 and I'm scared it's too late
            about to become a big brother to a newborn sister and my parents are busy
            a chef who wants to write a cookbook but never finds the time
            a student who wants to read more books but always gets distracted
            a dog owner and my dog barks whenever someone walks past the house
            going back to work after a year of parental leave
            a commuter with a 90-minute journey each way and I want to use the time well
            a beginner gardener with a shady balcony
        """),
        k=1,
        styled=True,
    ),
    Family(
        "recipes",
        [
            "Give me a simple recipe for {x}.",
            "How do I make {x}? I'm not a great cook.",
            "What do I need for {x}, and what are the steps?",
            "Can you write a recipe for {x} that serves four?",
            "Quick recipe for {x}?",
            "I want to cook {x} tonight. Walk me through it.",
        ],
        _lines("""
            shakshuka
            a simple risotto
            falafel
            minestrone soup
            French toast
            a Greek salad
            chicken noodle soup
            overnight oats
            a vegetable stir-fry
            homemade pizza dough
            scrambled eggs on toast
            a lentil dahl
            roasted vegetables
            a tuna pasta bake
            a fruit crumble
            garlic bread
            a bean chilli
            a Spanish omelette
            baked salmon with lemon
            a peanut butter smoothie
            mashed potatoes
            a simple tomato sauce
            carrot cake
            chicken fajitas
            coleslaw
            a mushroom omelette
            iced tea
            hot chocolate from scratch
            potato wedges
            a chickpea salad
        """),
    ),
    Family(
        "cooking_questions",
        [
            "{x}",
            "Cooking question: {x}",
            "{x} I'm a beginner in the kitchen.",
        ],
        _lines("""
            How long should I boil an egg for a runny yolk?
            Can I freeze cooked rice?
            What can I use instead of eggs in baking?
            How do I know when chicken is cooked through?
            Why did my bread come out dense?
            What's the difference between baking soda and baking powder?
            How do I stop pasta from sticking together?
            How long does cooked pasta keep in the fridge?
            What spices go well with roasted carrots?
            How do I cook rice so it isn't mushy?
            Can I use olive oil for frying?
            What's a good side dish for grilled fish?
            How do I make a sauce thicker?
            Is it safe to eat raw cookie dough?
            How do I caramelise onions properly?
            What does it mean to fold ingredients together?
            How do I keep avocados from going brown?
            What should I do if I added too much salt to a soup?
            How do I soften butter quickly?
            What is the best way to reheat pizza?
            How can I tell if an egg is still fresh?
            What herbs go well with tomatoes?
            Do I need to wash mushrooms before cooking them?
            How ripe should bananas be for banana bread?
        """),
    ),
    Family(
        "lists",
        [
            "Give me {n} {x}.",
            "{N} {x}, please. Keep each one short.",
            "Make a numbered list of {n} {x}.",
            "What are {n} {x}? Use bullet points.",
            "Can you suggest {n} {x}?",
            "List {n} {x} with one sentence on each.",
        ],
        _lines("""
            ways to use leftover rice
            questions to ask a new doctor
            cheap date ideas
            ways to make a small room feel bigger
            conversation starters for a dinner party
            things to do on a long flight
            easy science experiments for kids
            ideas for a team-building day
            ways to reduce food waste at home
            podcast topic ideas
            songs to play at a summer barbecue
            things to bring to a picnic
            low-cost hobbies
            ways to keep a journal
            ideas for a school fundraiser
            fun facts about the ocean
            signs that a houseplant needs more light
            things to do in a small town on a Sunday
            ways to practise gratitude
            ideas for a themed costume party
            uses for an old jam jar
            ways to get better at chess
            warm-up exercises before running
            things to check before a long car journey
            ways to keep kids busy on a car trip
            simple ways to be kinder to strangers
            ideas for a vegetarian barbecue
            things every first aid kit should have
            ways to make a presentation more engaging
            good habits for a morning routine
            birthday gift ideas for a ten-year-old
            ways to learn to touch-type
            ideas for a short weekend getaway
            reasons to visit a library
            winter activities for families
        """),
        styled=True,
    ),
    Family(
        "comparisons",
        [
            "What's the difference between {a} and {b}?",
            "{a} vs {b}: how do I choose?",
            "Compare {a} and {b} in a short table.",
            "How are {a} and {b} alike, and how are they different?",
            "In two sentences, how do {a} and {b} differ?",
            "I always mix up {a} and {b}. Can you clear it up?",
        ],
        _pairs("""
            a crocodile | an alligator
            a violin | a viola
            a hurricane | a tornado
            a virus | a computer worm
            weight | mass
            a latte | a cappuccino
            a lake | a pond
            a frog | a toad
            a town | a city
            a rabbit | a hare
            affect | effect
            an emu | an ostrich
            a mortgage | a loan
            a debit card | a credit card
            an LED bulb | a halogen bulb
            a meteor | a meteorite
            a dolphin | a porpoise
            a herb | a spice
            a sweet potato | a yam
            HTML | CSS
            a laptop | a tablet
            a novel | a novella
            a psychologist | a psychiatrist
            a republic | a monarchy
            an ocean | a sea
            a mushroom | a toadstool
            a butterfly | a moth
            a sprint | a marathon
            speed | velocity
            a simile | a metaphor
            Git | GitHub
            a cold | the flu
            jam | jelly
            an atom | a molecule
        """),
    ),
    Family(
        "definitions",
        [
            "What does '{x}' mean?",
            "define {x}",
            "Use the word '{x}' in a sentence.",
            "What's a simpler word for '{x}'?",
            "Explain the meaning of '{x}' and give an example.",
            "{x} -- meaning?",
        ],
        _lines("""
            ubiquitous
            serendipity
            ephemeral
            pragmatic
            meticulous
            nostalgia
            resilient
            ambiguous
            procrastinate
            eloquent
            benevolent
            candid
            mundane
            frugal
            diligent
            gregarious
            tenacious
            whimsical
            obsolete
            plausible
            redundant
            sceptical
            verbose
            vivid
            zealous
            empathy
            irony
            paradox
            hypothesis
            etiquette
            jargon
            metaphor
            cliché
            euphemism
        """),
    ),
    Family(
        "idioms",
        [
            "What does the phrase '{x}' mean?",
            "Where does the expression '{x}' come from?",
            "Use '{x}' in an example sentence and explain it.",
            "My colleague said '{x}'. What did she mean?",
        ],
        _lines("""
            break the ice
            bite the bullet
            once in a blue moon
            the ball is in your court
            spill the beans
            hit the nail on the head
            cost an arm and a leg
            under the weather
            let the cat out of the bag
            burn the midnight oil
            a piece of cake
            barking up the wrong tree
            cut corners
            get cold feet
            on the fence
            the elephant in the room
            add insult to injury
            back to the drawing board
            call it a day
            miss the boat
            a blessing in disguise
            beat around the bush
            when pigs fly
            pull someone's leg
        """),
    ),
    Family(
        "grammar",
        [
            "When should I use {x}?",
            "Can you explain {x} with examples?",
            "Grammar question: how does {x} work?",
            "I'm learning English. Please explain {x} simply.",
        ],
        _lines("""
            'who' versus 'whom'
            a semicolon
            'fewer' versus 'less'
            'its' versus 'it's'
            the present perfect tense
            'a' versus 'an'
            an apostrophe for possession
            the passive voice
            'lay' versus 'lie'
            a colon
            'i.e.' versus 'e.g.'
            'their', 'there' and 'they're'
            commas in a list
            'then' versus 'than'
            the past continuous tense
            'whose' versus 'who's'
            conditional sentences with 'if'
            adverbs
            'good' versus 'well'
            question tags like 'isn't it?'
        """),
    ),
    Family(
        "geography_terse",
        [
            "capital of {x}?",
            "What's the capital city of {x}?",
            "Which continent is {x} in?",
            "What language do people mainly speak in {x}?",
            "What currency does {x} use?",
            "Tell me three quick facts about {x}.",
            "What is {x} best known for?",
        ],
        _lines("""
            Portugal
            Argentina
            Poland
            Morocco
            New Zealand
            Ireland
            Colombia
            Sweden
            Finland
            Ghana
            South Korea
            Indonesia
            Turkey
            Austria
            Switzerland
            Iceland
            Nepal
            Cuba
            Hungary
            Ethiopia
            the Philippines
            Denmark
            Malaysia
            Uruguay
            Croatia
            Jordan
            Tanzania
            Belgium
            Mongolia
            Jamaica
            Ecuador
            Scotland
        """),
    ),
    Family(
        "trivia",
        [
            "{x}",
            "Trivia time: {x}",
            "{x} Just the answer, please.",
            "{x} Answer in one sentence and add one fun detail.",
        ],
        _lines("""
            What is the largest planet in our solar system?
            Who wrote 'Pride and Prejudice'?
            How many bones are in the adult human body?
            What is the tallest mountain in the world?
            Which planet is known as the Red Planet?
            What is the chemical symbol for gold?
            Who painted the Mona Lisa?
            What is the longest river in Africa?
            How many continents are there?
            What is the hardest natural substance?
            In which year did the Second World War end?
            What is the smallest country in the world?
            Who discovered gravity when an apple fell, according to the story?
            What gas do plants absorb from the air?
            How many players are on a football team on the pitch?
            What is the fastest land animal?
            Which ocean is the largest?
            What is the freezing point of water in Fahrenheit?
            Who was the first person to walk on the Moon?
            What is the main ingredient in guacamole?
            How many legs does a spider have?
            What is the largest desert in the world?
            Which instrument has 88 keys?
            What is the capital of Australia?
            How many sides does a hexagon have?
            Who invented the telephone?
            What is the largest mammal?
            Which element has the symbol O?
            What language has the most native speakers?
            How many minutes are in a day?
            What is the currency of Japan?
            Which country gave the Statue of Liberty to the United States?
            What is the closest star to Earth?
            What do bees collect from flowers?
            How many strings does a standard guitar have?
            What is the boiling point of water in Celsius at sea level?
        """),
    ),
    Family(
        "animals",
        [
            "Tell me some interesting facts about {x}.",
            "How long do {x} live?",
            "What do {x} eat?",
            "Where do {x} live in the wild?",
            "Are {x} dangerous to humans?",
            "How do {x} communicate?",
            "What makes {x} special?",
        ],
        _lines("""
            octopuses
            axolotls
            sloths
            hedgehogs
            elephants
            flamingos
            sea otters
            giraffes
            penguins
            wolves
            koalas
            honeybees
            chameleons
            snails
            orcas
            red pandas
            crows
            tortoises
            jellyfish
            kangaroos
            hummingbirds
            seahorses
            camels
            bats
            beavers
            polar bears
            ants
            parrots
        """),
        styled=True,
    ),
    Family(
        "tech_help",
        [
            "How do I {x}?",
            "Can you tell me how to {x}?",
            "I'm not very techy. How would I {x}?",
            "What's the quickest way to {x}?",
            "Step by step, how do I {x}?",
        ],
        _lines("""
            take a screenshot on a Windows laptop
            free up storage on my phone
            set up two-factor authentication
            make my home Wi-Fi faster
            find out which apps drain my phone battery
            share a large file with someone
            make a strong but memorable password
            tell if an email is a phishing scam
            clear my browser cache
            connect wireless headphones to my laptop
            turn a document into a PDF
            set up a shared family calendar
            stop so many notifications on my phone
            speed up an old laptop
            make a simple budget in a spreadsheet
            recover a file I deleted by mistake
            mute a group chat without leaving it
            make text bigger on my phone for my grandmother
            print double-sided
            use keyboard shortcuts to copy and paste
            set up a new printer
            check my internet speed
            record my screen
            update the apps on my phone
            zip a folder
        """),
        styled=True,
    ),
    Family(
        "coding_concepts",
        [
            "What is {x} in programming?",
            "Explain {x} with a short code example.",
            "I'm learning to code. What's {x} and why does it matter?",
            "Give me a beginner-friendly explanation of {x}.",
            "What is {x}? Keep it under 100 words.",
        ],
        _lines("""
            a closure
            a race condition
            dependency injection
            a REST API
            big-O notation
            a pointer
            garbage collection
            a lambda function
            immutability
            an enum
            unit testing
            a regular expression
            a variable's scope
            an exception
            a callback function
            asynchronous code
            a class and an object
            inheritance
            an interface
            a dictionary or map
            a for loop
            a while loop
            a boolean
            a string
            a function's return value
            a merge conflict
            a memory leak
            a linter
            a package manager
            JSON
            an environment variable
            a unique ID
            a deadlock
            type hints in Python
            a virtual environment
        """),
    ),
    Family(
        "sql",
        [
            "Write an SQL query that {x}.",
            "How would I write a SQL query that {x}? Explain each part.",
            "SQL help: I need a query that {x}.",
        ],
        _lines("""
            finds the ten most recent orders
            counts how many customers live in each city
            lists employees earning more than 50000
            finds products that have never been ordered
            returns the average price per category
            deletes rows where the email is empty
            joins an orders table with a customers table
            finds duplicate email addresses
            shows the total sales for each month
            selects users who signed up in the last 7 days
            updates the price of one product
            finds the second highest salary
            lists books with titles starting with 'The'
            counts orders per customer and sorts by the count
            finds students with a grade above the class average
            creates a table for storing blog posts
            finds the oldest person in a people table
            returns customers with no email address
            adds a new column to an existing table
            groups sales by region and keeps only regions over 1000
        """),
    ),
    Family(
        "command_line",
        [
            "How do I {x} from the command line?",
            "What's the terminal command to {x}?",
            "On Linux, how can I {x}?",
            "Show me a shell command to {x}, and explain it.",
        ],
        _lines("""
            find all files larger than 100 MB
            count the lines in a file
            rename many files at once
            see which process is using a port
            search for a word in every file in a folder
            check how much disk space is free
            copy a folder to another computer
            make a script executable
            show the last 20 lines of a log file
            create a compressed archive of a folder
            list files sorted by size
            see my command history
            download a file from a URL
            kill a process that is stuck
            create a new git branch and switch to it
            undo my last git commit
            see what changed in a git repository
            set an environment variable
            find where a program is installed
            watch a log file as it grows
        """),
    ),
    Family(
        "money",
        [
            "What is {x}?",
            "Can you explain {x} in simple terms?",
            "I'm 22 and clueless about money. What's {x}?",
            "Explain {x}, and tell me if I should care about it.",
        ],
        _lines("""
            an emergency fund
            an index fund
            a mortgage
            APR on a credit card
            a pension
            the 50/30/20 budgeting rule
            a credit report
            a dividend
            a savings account with interest
            an overdraft
            a tax return
            net worth
            diversification in investing
            a budget
            a direct debit
            an insurance excess
            a loan guarantor
            a bond
            a share in a company
            a fixed-rate loan
            a student loan
            a currency exchange rate
            a credit limit
            a subscription trap
        """),
        styled=True,
    ),
    Family(
        "travel",
        [
            "What should I know before visiting {x}?",
            "Plan me three days in {x}.",
            "What are some local foods I should try in {x}?",
            "Is {x} a good place for a first trip abroad?",
            "Give me a rainy-day plan and a sunny-day plan for {x}.",
            "What's the best time of year to visit {x}?",
        ],
        _lines("""
            Kyoto
            Marrakesh
            Prague
            Edinburgh
            Hanoi
            Buenos Aires
            Vancouver
            Reykjavik
            Cape Town
            Vienna
            Dublin
            Mexico City
            Copenhagen
            Singapore
            Budapest
            Athens
            Bangkok
            San Francisco
            Krakow
            Seville
            Melbourne
            Montreal
            Florence
            Dubrovnik
            Lima
            Oslo
        """),
    ),
    Family(
        "fitness",
        [
            "How do I do a proper {x}?",
            "What muscles does a {x} work?",
            "I'm a beginner. How many reps of the {x} should I start with?",
            "What are common mistakes people make with a {x}?",
            "Is a {x} safe if I have a bad knee?",
        ],
        _lines("""
            push-up
            squat
            plank
            lunge
            deadlift
            burpee
            pull-up
            glute bridge
            jumping jack
            mountain climber
            sit-up
            side plank
            calf raise
            wall sit
            bicep curl
            bench press
            kettlebell swing
            step-up
            tricep dip
            downward dog yoga pose
        """),
    ),
    Family(
        "gifts",
        [
            "Gift ideas for {x}?",
            "What should I get {x}? Budget is about 30 dollars.",
            "Help me pick a present for {x}.",
            "Give me five thoughtful gift ideas for {x}.",
        ],
        _lines("""
            my dad who loves fishing
            a friend who just moved into her first flat
            my grandmother who has everything
            a coworker who is retiring
            a teenager who loves video games
            my partner who is learning to cook
            a teacher at the end of the school year
            a friend who runs marathons
            my sister who is having a baby
            a neighbour who helped me move
            someone who loves gardening
            my brother who is into photography
            a friend who is a big reader
            my boss, without being awkward
            a six-year-old who loves dinosaurs
            a coffee lover
            someone going through a hard time
            my mum who likes puzzles
            a friend graduating from university
            a host at a dinner party
        """),
    ),
    Family(
        "naming",
        [
            "Suggest some names for {x}.",
            "I need a name for {x}. Give me ten options.",
            "Can you brainstorm catchy names for {x}?",
            "What would be a good name for {x}? Explain your top pick.",
        ],
        _lines("""
            a golden retriever puppy
            a small bakery
            a podcast about local history
            a fantasy kingdom
            a book club
            a black cat
            a coffee shop near a university
            a hiking group
            a family WhatsApp group
            a goldfish
            a board game about pirates
            a vegan food truck
            a spaceship in my sci-fi story
            a dog-walking business
            a school science club
            a wizard character
            a quiz team
            a houseplant
            a small online shop that sells candles
            a robot vacuum cleaner
            a running club
            a new flavour of ice cream
        """),
    ),
    Family(
        "explain_to_kid",
        [
            "How would you explain {x} to a five-year-old?",
            "My daughter wants to know {x}. How should I explain it?",
            "Explain {x} in a way a young child would understand.",
        ],
        _lines("""
            what money is
            why we need to brush our teeth
            where the Sun goes at night
            why we have to go to school
            what a dream is
            why the sea has waves
            how babies grow
            why some people wear glasses
            what electricity is
            why we can't see air
            what a country is
            why the Moon changes shape
            what germs are
            why we have to recycle
            what a computer does
            why we have birthdays
            what an echo is
            why cats always land on their feet
            how fish breathe underwater
            why thunder is so loud
        """),
    ),
    Family(
        "poem_subjects",
        [
            "Write a haiku about {x}.",
            "Write a short free-verse poem about {x}.",
            "Write an acrostic poem about {x}.",
            "Write a rhyming couplet about {x}.",
            "Write a four-line poem about {x} for a greeting card.",
            "Can you write a funny little poem about {x}?",
            "Write a poem about {x} in the style of a nursery rhyme.",
        ],
        _lines("""
            a first snowfall
            a busy kitchen
            a lost umbrella
            the last day of summer
            a grandmother's garden
            a bus stop at dawn
            a lighthouse
            a bicycle
            Monday mornings
            a cup of tea
            a thunderstorm
            the smell of fresh bread
            a lazy Sunday
            an old photograph
            a full moon
            a busy market
            a paper boat
            learning to swim
            a broken phone screen
            a goldfish
            the first day of spring
            a quiet library
            a long road trip
            a campfire
            a birthday cake
            a hedgehog
            city traffic
            a sunflower
        """),
    ),
    Family(
        "stories",
        [
            "Write a 100-word story about {x}.",
            "Tell a short fable about {x}, with a moral at the end.",
            "Write a short story about {x} that ends with a twist.",
            "Write a cosy bedtime story about {x}.",
            "Write the first paragraph of a mystery about {x}.",
            "Tell me a funny short story about {x}.",
            "Write a story about {x} in exactly five sentences.",
        ],
        _lines("""
            a shy ghost who wants friends
            a postman who delivers letters to the Moon
            a cat who becomes mayor of a small town
            a girl who can hear plants talking
            an inventor whose machines keep going wrong
            a fox and a crow who share a secret
            a grandfather teaching his grandson to fish
            a robot chef in a busy restaurant
            a tortoise who wants to win a race again
            a snowman who doesn't want to melt
            two rival bakers on the same street
            a boy who finds a door in the back of his wardrobe
            a lost suitcase travelling around the world
            a librarian who guards a magic book
            a pirate who is afraid of water
            a squirrel planning the perfect heist
            a new student on a spaceship school
            a farmer whose scarecrow comes to life
            a musician who loses her voice before a concert
            an old dog and a new puppy
            a town where it rains lemonade once a year
            a knight who would rather be a gardener
            a lighthouse that stops working on a stormy night
            a teenager who swaps lives with her grandmother for a day
            a sandcastle that wants to see the ocean
            a detective pigeon
        """),
    ),
    Family(
        "jokes",
        [
            "Tell me a joke about {x}.",
            "Got any puns about {x}?",
            "Write a clean joke about {x} that a kid would get.",
            "I need a funny one-liner about {x} for a speech.",
            "Make up a knock-knock joke about {x}.",
        ],
        _lines("""
            computers
            vegetables
            teachers
            the weather
            dinosaurs
            maths
            coffee
            dentists
            penguins
            the ocean
            football
            cheese
            astronauts
            Mondays
            libraries
            sharks
            bananas
            pirates
            ghosts
            music
            cooking
            trees
            the alphabet
            time travel
        """),
    ),
    Family(
        "riddles_make",
        [
            "Give me a riddle about {x}.",
            "Make up a riddle whose answer is {x}.",
            "Write a riddle for kids where the answer is {x}, and give the answer at the end.",
        ],
        _lines("""
            a clock
            a shadow
            an egg
            a candle
            the letter E
            a towel
            a map
            an echo
            a keyboard
            a mirror
            a river
            footsteps
            a cloud
            an umbrella
            a secret
            the wind
            a needle
            a book
            a snowman
            a piano
        """),
    ),
    Family(
        "riddles_solve",
        [
            "Can you solve this riddle? {x}",
            "Riddle: {x}",
            "{x} Explain the answer.",
        ],
        _lines("""
            What has hands but can't clap?
            What gets wetter the more it dries?
            What has a neck but no head?
            What can you catch but not throw?
            What goes up but never comes down?
            What has many teeth but can't bite?
            What has one eye but can't see?
            What can travel around the world while staying in a corner?
            What is full of holes but still holds water?
            What runs but never walks?
            What has a head and a tail but no body?
            I'm tall when I'm young and short when I'm old. What am I?
            What belongs to you but other people use it more than you do?
            What comes once in a minute, twice in a moment, but never in a thousand years?
            What has to be broken before you can use it?
            The more you take, the more you leave behind. What are they?
            What has words but never speaks?
            What kind of room has no doors or windows?
            What can fill a room but takes up no space?
            What has legs but doesn't walk?
        """),
    ),
    Family(
        "roleplay",
        [
            "Pretend you are {x} and introduce yourself.",
            "You are {x}. A visitor asks what a normal day is like for you. Answer in character.",
            "Role-play as {x} and give me one piece of advice.",
            "Act like {x} and describe what you can see right now.",
            "Stay in character as {x}: what is your biggest worry?",
        ],
        _lines("""
            a pirate captain
            a medieval innkeeper
            a friendly tour guide in Rome
            a grumpy old wizard
            a detective in 1920s London
            an astronaut on the International Space Station
            a lighthouse keeper on a remote island
            a cheerful dragon
            a Roman soldier
            a barista at a very busy cafe
            a zookeeper
            a librarian who has read every book
            a knight guarding a castle gate
            a fortune teller at a fair
            a sports coach before a big final
            a famous chef judging a cooking contest
            an alien visiting Earth for the first time
            a park ranger
            a talking cat
            a ship's cook in the 1700s
            a museum guide
            a time traveller from the year 3000
        """),
    ),
    Family(
        "dialogues",
        [
            "Write a short dialogue between {x}.",
            "Write a funny conversation between {x}.",
            "Script a six-line exchange between {x}.",
            "Write a scene, mostly dialogue, between {x}.",
        ],
        _lines("""
            a customer and a barista who got the order wrong
            a teacher and a student who forgot their homework
            two astronauts who have run out of snacks
            a dog and a cat arguing about who is the better pet
            a tourist and a local giving directions
            a doctor and a nervous patient
            two friends planning a surprise party
            a shopkeeper and a customer returning a jumper
            a parent and a child who wants a pet
            a job applicant and an interviewer at a pizza shop
            a knight and a dragon negotiating
            two neighbours over a garden fence
            a hotel receptionist and a guest whose room isn't ready
            a grandmother and her grandson about smartphones
            a coach and a player after a lost match
            a waiter and a very indecisive diner
            two strangers stuck in a lift
            a librarian and someone returning a book ten years late
            a mechanic and a driver whose car makes a strange noise
            two ghosts haunting the same house
        """),
    ),
    Family(
        "product_copy",
        [
            "Write a product description for {x}.",
            "Write a catchy two-line ad for {x}.",
            "Write an online shop listing (a title plus three bullet points) for {x}.",
            "Describe {x} in a way that would make someone want to buy it. Under 80 words.",
            "Write a short, honest product description for {x}. No hype.",
        ],
        _lines("""
            a bamboo toothbrush
            a reusable water bottle
            a handmade wool scarf
            noise-cancelling earbuds
            a cast-iron frying pan
            a waterproof hiking jacket
            a smart plant pot that reminds you to water
            a weekly meal planner notebook
            a folding electric bike
            a scented soy candle
            a kids' science kit
            a desk lamp with adjustable brightness
            a travel pillow
            a set of wooden building blocks
            a phone stand for the kitchen
            locally roasted coffee beans
            a wireless phone charger
            a beginner's watercolour set
            a dog raincoat
            an alarm clock that simulates sunrise
            a lunch box with separate compartments
            a portable picnic blanket
        """),
    ),
    Family(
        "letters",
        [
            "Write a letter {x}.",
            "Draft a message {x}. Keep it under 100 words.",
            "Can you help me word a note {x}? Warm but not cheesy.",
            "Write a short, sincere message {x}.",
        ],
        _lines("""
            to my future self in ten years
            thanking a neighbour who watered my plants
            of complaint about a noisy restaurant next door
            to a pen pal in another country
            apologising to a friend for missing her party
            to my old teacher telling her how much she helped me
            welcoming a new employee to the team
            asking the council to fix a pothole on my street
            congratulating my cousin on her wedding
            saying goodbye to colleagues on my last day
            asking a neighbour to keep their dog quiet at night
            thanking the nurses who looked after my dad
            to a company asking if they have any internships
            inviting my class to a reunion
            to my landlord asking if I can get a cat
            telling a customer their order is delayed
            to a local newspaper about more bike lanes
            offering condolences to a coworker
            to a host family thanking them for my stay
            asking my gym to cancel my membership
        """),
    ),
    Family(
        "planning",
        [
            "Help me plan {x}.",
            "Make a plan for {x}. Use a table if it helps.",
            "I need help organising {x}. Can you lay out the steps?",
            "Can you put together a checklist for {x}?",
        ],
        _lines("""
            a week of simple dinners for two people on a budget
            a surprise 30th birthday party
            a four-week beginner running schedule
            a study schedule for a history exam in two weeks
            a tidy-up of my whole flat in one weekend
            a day out at the beach with toddlers
            a small wedding for 40 guests
            a morning routine that gets me out the door by eight
            a garden that attracts bees and butterflies
            a reading challenge for the year
            a road trip along the coast over five days
            a kids' birthday party for ten seven-year-olds
            a monthly budget on a 2000-dollar income
            a simple weekly workout routine with no gym
            a board game night for eight friends
            a day of revision for a maths test
            a charity bake sale
            a week-long beach holiday
            a first camping trip with my family
            three months of self-study to learn 500 Spanish words
            a clean-up day for our local park
            a housewarming party in a small flat
        """),
    ),
    Family(
        "opinions",
        [
            "What do you think about {x}?",
            "Overrated or underrated: {x}?",
            "Give me your honest take on {x}.",
            "Argue for and against {x} in a few sentences each.",
            "Hot take: {x}. Agree or disagree?",
        ],
        _lines("""
            pineapple on pizza
            reading the book before watching the film
            homework for young children
            school uniforms
            tipping in restaurants
            keeping a diary
            learning handwriting in the age of keyboards
            superhero films
            zoos
            getting up at 5 a.m.
            buying second-hand clothes
            video games as a hobby for adults
            long summer holidays from school
            paying for everything by card
            camping holidays
            remakes of old films
            having a pet as a student
            audiobooks
            car-free city centres
            eating breakfast every day
            group projects at school
            paper maps in a world of GPS
        """),
        styled=True,
    ),
    Family(
        "big_questions",
        [
            "{x}",
            "Philosophy question: {x}",
            "{x} Give a couple of different viewpoints.",
        ],
        _lines("""
            Is it ever okay to lie?
            What makes a person a good friend?
            Can money buy happiness?
            Is it better to be kind or to be honest?
            What does it mean to live a good life?
            Do animals have feelings like people do?
            Should we always follow the rules?
            Is luck or hard work more important for success?
            Why do people enjoy sad songs?
            Is it better to be a big fish in a small pond or a small fish in a big pond?
            What makes something art?
            Can people really change?
            Why do we find some things beautiful?
            Is it selfish to want to be famous?
            What is the point of learning history?
            Are we responsible for what we do when we are angry?
            Is it more important to be liked or respected?
            Should everyone learn to cook?
            What makes a place feel like home?
            Is boredom good for us?
        """),
    ),
    Family(
        "hobbies",
        [
            "I want to get into {x}. Where do I start?",
            "What do I need to start {x}?",
            "Beginner tips for {x}?",
            "Is {x} expensive to get into? What's the cheapest way to start?",
            "How long does it take to get decent at {x}?",
        ],
        _lines("""
            birdwatching
            knitting
            rock climbing
            baking sourdough
            photography
            drawing
            journaling
            skateboarding
            pottery
            yoga
            playing the piano
            gardening on a balcony
            chess
            swimming as an adult
            running
            calligraphy
            woodworking
            fishing
            stargazing
            juggling
            writing short stories
            crochet
            cycling to work
            making candles
        """),
    ),
    Family(
        "math_concepts",
        [
            "What is {x}? Explain with an example.",
            "Can you show me an example of {x}?",
            "Can you explain {x} step by step?",
            "I never understood {x} at school. Can you help?",
        ],
        _lines("""
            the median of a set of numbers
            a ratio
            the area of a circle
            long division
            a percentage increase
            the mode of a data set
            simplifying fractions
            the volume of a cube
            negative times negative
            the order of operations
            an equation with one unknown
            the mean of some test scores
            a prime factorisation
            the circumference of a circle
            rounding to two decimal places
            the angles in a triangle
            a square number
            the lowest common multiple
            a probability of rolling a six
            scientific notation
            converting a fraction to a percentage
            the range of a data set
        """),
    ),
    Family(
        "pets_plants",
        [
            "{x}",
            "{x} Please be practical.",
            "Quick question about my home: {x}",
        ],
        _lines("""
            How often should I water a snake plant?
            Why are the leaves on my basil turning yellow?
            How do I get my cat to stop scratching the sofa?
            What should I feed a pet rabbit?
            How do I repot a houseplant?
            Is it normal for my dog to eat grass?
            How big a tank does a goldfish need?
            How can I keep my tomato plants healthy?
            What plants are safe to keep around cats?
            How often should I walk a young dog?
            How do I introduce a new kitten to my older cat?
            What's the easiest herb to grow on a windowsill?
            Why does my dog follow me everywhere?
            How do I know if my plant is getting too much sun?
            How do I get rid of aphids on my roses?
            How can I help my dog be calm during fireworks?
            What's a good first pet for a child?
            How do I take care of a succulent?
            Why is my cat meowing so much at night?
            How do I make compost from kitchen scraps?
        """),
    ),
    Family(
        "work_questions",
        [
            "{x}",
            "Work question: {x}",
            "{x} Give me a couple of options.",
            "{x} Be specific, please.",
        ],
        _lines("""
            How do I tell my boss I'm overwhelmed?
            How can I say no to extra work politely?
            What should I say in my first team meeting?
            How do I give feedback to a coworker without upsetting them?
            How can I run a shorter, better meeting?
            What's a good way to introduce myself on a video call?
            How do I ask for help without looking incompetent?
            How should I reply when a client is rude?
            How can I stay focused in a noisy office?
            How do I write a clear status update?
            What should I do in my first week at a new job?
            How do I ask for a deadline to be moved?
            How can I be better at small talk with colleagues?
            What's the best way to take notes in meetings?
            How do I handle a coworker who takes credit for my work?
            How do I say I made a mistake at work?
            How do I prepare for my yearly review?
            What should I do if I disagree with my manager's decision?
            How can I keep my inbox under control?
            How do I hand over my work before a holiday?
        """),
    ),
    Family(
        "relationships",
        [
            "{x}",
            "Need some advice: {x}",
            "{x} I'd like a kind but practical answer.",
        ],
        _lines("""
            How do I tell a friend they hurt my feelings?
            My roommate never does the dishes. What should I say?
            How can I support a friend who just lost their job?
            How do I make friends as an adult?
            My brother and I keep arguing about small things. How can we stop?
            How do I say sorry when I was wrong?
            How can I be a better listener?
            A friend keeps cancelling plans at the last minute. What should I do?
            How do I set boundaries with my parents without upsetting them?
            What's a nice thing I could do for my partner this week?
            How can I stay close to a friend who moved abroad?
            How do I deal with a friend who always complains?
            How do I welcome a new neighbour?
            How can I help my shy child make friends?
            How do I tell my friend I can't afford the holiday she's planning?
            My flatmate plays music late at night. How do I bring it up?
            How do I reconnect with an old friend I haven't spoken to in years?
            How can I be supportive when my partner is stressed about work?
            How do I turn down a wedding invitation without offending anyone?
            What should I say to a friend whose pet just died?
        """),
    ),
    Family(
        "motivation",
        [
            "Write a short motivational message for {x}.",
            "Give some words of encouragement to {x}.",
            "What could I say to cheer up {x}?",
        ],
        _lines("""
            someone starting a new job
            a student the night before exams
            a friend who didn't get into the university they wanted
            my team after a hard quarter
            someone running their first marathon
            a child learning to ride a bike
            a friend recovering from surgery
            someone who just moved to a new country
            a colleague giving their first big presentation
            my little brother who lost his football final
            someone learning a new language
            a friend starting their own business
            myself on a bad Monday
            a nervous driver before their driving test
            a friend who is going through a break-up
            my daughter on her first day at a new school
            a volunteer team after a long weekend of work
            someone trying to quit smoking
            a coworker who just got some bad news
            a teenager who failed a test
        """),
    ),
    Family(
        "toasts_posts",
        [
            "Write a short toast for {x}.",
            "Write a social media post about {x}.",
            "Write a two-sentence announcement for {x}.",
            "Write a fun caption for a photo of {x}.",
        ],
        _lines("""
            my sister's wedding
            my parents' 40th anniversary
            a friend's retirement party
            the opening of our new cafe
            our team winning the local quiz
            my best friend's graduation
            a colleague's farewell lunch
            a new puppy joining the family
            the first day of our book club
            finishing my first half-marathon
            our community garden's first harvest
            my grandfather's 90th birthday
            the launch of a small online shop
            a New Year's Eve dinner with friends
            moving into our first home
            our school's charity run raising 2000 dollars
            my son's first football goal
            the last day before the summer holidays
            a family reunion after ten years
            finishing a 1000-piece jigsaw puzzle
        """),
    ),
    Family(
        "sports_games",
        [
            "Explain the rules of {x}.",
            "How do you play {x}? Keep it simple.",
            "What's a good strategy for a beginner at {x}?",
            "How does scoring work in {x}?",
        ],
        _lines("""
            cricket
            basketball
            volleyball
            poker
            sudoku
            Monopoly
            curling
            rugby
            tennis
            badminton
            table tennis
            Scrabble
            bowling
            golf
            ice hockey
            darts
            Uno
            noughts and crosses
            dominoes
            baseball
            handball
            mahjong
        """),
    ),
    Family(
        "words",
        [
            "Give me some synonyms for '{x}'.",
            "What's the opposite of '{x}'?",
            "Give me five words that rhyme with '{x}'.",
            "What are some more interesting words to use instead of '{x}'?",
        ],
        _lines("""
            happy
            big
            quickly
            sad
            good
            said
            walk
            nice
            cold
            bright
            tired
            small
            interesting
            angry
            easy
            important
            old
            funny
            look
            strong
            calm
            brave
        """),
    ),
    Family(
        "health_everyday",
        [
            "{x}",
            "General question, not medical advice needed: {x}",
            "{x} Keep it brief and sensible.",
        ],
        _lines("""
            How much water should an adult drink in a day?
            Is it bad to crack your knuckles?
            How can I stop getting a headache after looking at screens?
            What are some healthy snacks for work?
            Is stretching before exercise important?
            How can I get more vegetables into my meals?
            Why do my legs ache after a long walk?
            What are good ways to relax after a stressful day?
            How much daily walking is considered healthy?
            Is it okay to exercise when I have a cold?
            How do I look after my eyes if I read a lot?
            What should be in a balanced lunch?
            How can I remember to take breaks during the day?
            What's a simple breathing exercise for stress?
            How can I improve my posture while sitting?
            Is coffee bad for you?
            How can I stay warm on a cold walk to work?
            Is it better to shower in the morning or at night?
            How long should a daily walk be to feel the benefit?
            What's a good way to start stretching every day?
        """),
    ),
    Family(
        "science_topics",
        [
            "Explain {x} in simple terms.",
            "What is {x}, and why should I care?",
            "Give me a short, clear explanation of {x}.",
            "Teach me the basics of {x} in a few sentences.",
            "What are three surprising facts about {x}?",
        ],
        _lines("""
            the speed of light
            static electricity
            the Big Bang
            ocean currents
            the ozone layer
            cells in the human body
            the food chain
            antibodies
            friction
            buoyancy
            condensation
            magnetic fields
            the Northern Lights
            the water table
            the human skeleton
            bacteria in yoghurt
            lightning
            fossils
            sound waves
            the periodic table
            solar eclipses
            the Milky Way
            acids and bases
            erosion
            pollination
            the human eye
            carbon dating
            the layers of the Earth
        """),
        styled=True,
    ),
]


# Two-slot families built as (template, filler list, second filler list).
CODE_TASKS = _lines("""
    counts how many times each character appears in a string
    checks whether a year is a leap year
    returns the sum of all odd numbers in a list
    converts a list of words to uppercase
    finds the most common element in a list
    splits a sentence into words and sorts them alphabetically
    checks whether a list is sorted
    returns the common elements of two lists
    prints a multiplication table for a number
    converts minutes into hours and minutes
    counts the words in a sentence
    replaces every space in a string with an underscore
    returns the minimum and maximum of a list
    calculates the area of a circle from its radius
    checks whether a password has at least eight characters and a digit
    chunks a list into groups of three
    removes all vowels from a string
    returns the initials of a full name
    converts kilometres to miles
    simulates rolling two dice
    checks whether a number is even or odd
    finds the index of a value in a list
    builds a dictionary from two lists
    prints FizzBuzz from 1 to 100
    calculates a tip for a restaurant bill
    counts down from 10 to 1
    returns the last n items of a list
    checks whether a string contains only digits
    computes the power of a number without using a built-in
    joins a list of strings with commas
    truncates a long string and adds '...'
    calculates someone's age from their birth year
""")
CODE_LANGS = _lines("""
    Python
    JavaScript
    TypeScript
    Java
    C#
    C++
    Go
    Rust
    Ruby
    PHP
    Kotlin
    Swift
    Bash
""")
CODE_TEMPLATES = [
    "Write a {lang} function that {task}.",
    "In {lang}, how would I write code that {task}?",
    "Show me a short {lang} example that {task}. Add comments.",
    "Can you write {lang} code that {task}, and explain it line by line?",
    "I'm new to {lang}. How do I write something that {task}?",
    "{lang}: function that {task}, please.",
]

POEM_FORMS = _lines("""
    a haiku
    a short free-verse poem
    a rhyming couplet
    an acrostic poem
    a four-line poem
    a silly poem
""")

TRANSLATE_PHRASES = _lines("""
    Where is the train station?
    How much does this cost?
    I would like a coffee, please.
    Thank you very much.
    Can you help me?
    I don't understand.
    Good morning, how are you?
    What time is it?
    The bill, please.
    Nice to meet you.
    Where is the bathroom?
    I am lost.
    Do you speak English?
    See you tomorrow.
    I am allergic to nuts.
    Happy birthday!
    It's very cold today.
    My name is Sam.
    I'm looking for a pharmacy.
    Have a good weekend.
""")
TRANSLATE_LANGS = ["Spanish", "French", "German", "Italian", "Portuguese", "Dutch"]
TRANSLATE_TEMPLATES = [
    "How do you say '{p}' in {lang}?",
    "Translate into {lang}: {p}",
    "What's '{p}' in {lang}? And how do I pronounce it?",
]

# ----------------------------------------------------------------------------------------------
# Short passages for "given text" tasks (all written for this module).

PASSAGES = [
    "The town library will close for two weeks in March while the roof is repaired. Books can "
    "still be returned through the slot by the front door, and the mobile library van will "
    "visit the market square every Saturday morning.",
    "Maria started her bakery in her own kitchen, selling loaves to neighbours. Five years "
    "later she has two shops and twelve staff, but she still gets up at four every morning to "
    "make the first batch of bread herself.",
    "Our new water bottle keeps drinks cold for 24 hours and hot for 12. It is made from "
    "stainless steel, fits in most car cup holders and comes in six colours. The lid is "
    "leak-proof and dishwasher safe.",
    "Dear residents, the bins will be collected on Wednesday instead of Monday next week because "
    "of the public holiday. Please put them out by 7 a.m. Recycling collection is not affected.",
    "Honey bees visit flowers to collect nectar, which they turn into honey back at the hive. "
    "While they feed, pollen sticks to their bodies and is carried to the next flower, which "
    "helps plants make seeds.",
    "Yesterday I finally tried the new noodle bar on Bridge Street. The broth was rich and "
    "warming, but I waited forty minutes for a table and the music was so loud I could barely "
    "hear my friend.",
    "Ahmed wanted to learn the guitar, so he promised himself fifteen minutes of practice every "
    "day. At first his fingers hurt and the chords sounded awful. After three months he played "
    "a whole song at his sister's birthday.",
    "The school sports day has been moved to Friday 14 June because of the weather forecast. "
    "Parents are welcome from 1 p.m. Please send children with a water bottle, a hat and sun "
    "cream.",
    "Octopuses have three hearts and blue blood. They can change the colour and texture of "
    "their skin in less than a second, which helps them hide from predators and sneak up on "
    "crabs.",
    "I have been with the company for six years, first in customer support and then as a team "
    "leader. I enjoy solving problems, training new staff and finding small ways to make our "
    "processes faster.",
    "Hi team, quick reminder that the office will be closed on Thursday for maintenance. Please "
    "take your laptops home on Wednesday evening. Normal opening resumes on Friday at 8 a.m.",
    "The Great Barrier Reef is the largest coral reef system in the world. It stretches for "
    "more than 2,000 kilometres off the coast of Australia and is home to thousands of species "
    "of fish, corals and other animals.",
    "Lena found an old camera at a flea market for five euros. When she developed the film "
    "still inside it, she discovered photos of her own street taken fifty years ago.",
    "Remote villages in the mountains often lose power during winter storms. This year the "
    "council has installed solar panels and batteries at the village hall so that people have "
    "somewhere warm to charge phones and make hot drinks.",
    "The museum's new dinosaur exhibition opens on Saturday. Visitors can see a full-size "
    "skeleton, touch real fossils and try a virtual-reality walk through a prehistoric forest. "
    "Tickets are free for children under five.",
    "Tom's car broke down on the motorway just after midnight. A lorry driver stopped, lent him "
    "a torch and waited with him until the recovery truck arrived an hour later. Tom never "
    "learned his name.",
    "Studies suggest that short walks after meals can help keep blood sugar steady. Even ten "
    "minutes of gentle walking seems to make a difference, and it is easier to fit into a busy "
    "day than a long workout.",
    "The café on the corner has changed hands. The new owners have kept the old wooden tables "
    "but added a small bookshelf where customers can swap books, and they now serve soup at "
    "lunchtime.",
    "Our flight to Lisbon was delayed by three hours, so we missed the first evening of the "
    "festival. The hotel staff were lovely, though, and kept dinner warm for us until almost "
    "midnight.",
    "Bamboo is one of the fastest-growing plants on Earth; some kinds can grow almost a metre "
    "in a single day. It is strong, light and used for building, furniture and even clothing.",
    "Please note that from next month the swimming pool will open at 6:30 a.m. on weekdays "
    "instead of 7. Early-bird lane swimming will be available until 8 a.m. and costs three "
    "pounds.",
    "When the river flooded last spring, volunteers filled sandbags for three days straight. "
    "The bakery gave out free bread, the school opened its hall for families, and nobody in "
    "the village was hurt.",
    "The new phone has a bigger screen and a better camera than last year's model, but the "
    "battery life is about the same and it costs 100 dollars more. Most reviewers say it is "
    "only worth it if your current phone is more than three years old.",
    "Grandpa Joe kept a notebook of every bird he saw from his kitchen window. After his death "
    "we counted the entries: 74 different species over 30 years, including one rare owl he "
    "underlined three times.",
    "Scientists have found that crows can recognise individual human faces and remember them "
    "for years. Crows that were once trapped by researchers would scold those same people "
    "whenever they walked by.",
    "To reset your router, unplug it from the wall, wait thirty seconds and plug it back in. If "
    "the lights are still red after five minutes, hold the reset button on the back for ten "
    "seconds.",
    "The community garden needs volunteers on Sunday mornings to water the beds, pull weeds and "
    "harvest vegetables for the food bank. No experience is needed and gloves are provided.",
    "I ordered a blue jumper in size medium, but I received a green one in size large. I would "
    "like to exchange it for the correct item, and I have kept all the original packaging.",
    "Marathon runners often 'hit the wall' around the 30-kilometre mark, when the body runs low "
    "on stored energy. Eating and drinking during the race and pacing yourself early on can "
    "help delay it.",
    "Sam and Priya have been best friends since they were six. They live on different "
    "continents now, but every Sunday they have a video call and cook the same recipe at the "
    "same time.",
    "The city plans to plant 10,000 new trees over the next five years, mostly along busy roads "
    "and in school playgrounds. Residents can also request a free tree for their street "
    "through the council website.",
    "Our hotel was close to the beach and the breakfast was excellent, but the room was tiny "
    "and the air conditioning was noisy all night. I would stay again, but only for a short "
    "trip.",
    "The first bicycles, built in the early 1800s, had no pedals. Riders pushed themselves "
    "along with their feet. Pedals, chains and air-filled tyres were added over the next "
    "eighty years.",
    "Kofi is organising a charity football match on 3 August at Riverside Park. Teams of "
    "seven can sign up for twenty dollars, and all the money will go to the children's "
    "hospital.",
    "Tea was first drunk in China thousands of years ago. It reached Europe in the 1600s, "
    "where it was at first so expensive that it was kept in locked boxes.",
    "If you smell gas in your home, do not switch any lights on or off. Open the windows, leave "
    "the building and call the emergency gas line from outside.",
]

PASSAGE_TASKS = [
    "Summarise this in one sentence:\n\n{p}",
    "Give this text a short title:\n\n{p}",
    'What is the main point of this text?\n\n"{p}"',
    "Turn this into three bullet points:\n\n{p}",
    "Rewrite this so that a young child could understand it:\n\n{p}",
    "Rewrite this passage in a more formal tone:\n\n{p}",
    "Is the tone of this text positive, negative or neutral? Explain briefly.\n\n{p}",
    "List every person, place, date or number mentioned in this text:\n\n{p}",
    "Write two questions a reader might ask after reading this:\n\n{p}",
    "Shorten this to under 25 words:\n\n{p}",
    "Text: {p}\n\nQuestion: what is this text mostly about?",
    "Rewrite this as a short social media post:\n\n{p}",
    "Read this and tell me the most important fact in it:\n\n{p}",
    "{p}\n\nCan you make this sound more exciting?",
    "Here is a paragraph:\n\n{p}\n\nWrite a one-line headline for it.",
    "Make a simple quiz question (with the answer) based on this text:\n\n{p}",
]

# Sentences with mistakes (for grammar fixing) and plain ones (for rewording).
ERROR_SENTENCES = _lines("""
    me and him goes to the shop every saturday.
    Their going to be late if they doesnt hurry.
    I has finished my homework yesterday.
    She dont like apples, she prefer oranges.
    The childrens was playing in the park.
    Can you borrow me your pen?
    We was very exciting about the trip.
    He run faster then his brother.
    Its a nice day, lets go to the beach.
    I seen that film last week and it were great.
    There is less people here than I expected.
    Who's bag is this?
    My sister and me has a dog called Max.
    If I would have known, I would have came earlier.
    The informations you gave me was very useful.
    He don't never listen to nobody.
    Everyone have their own opinion.
    I am living here since five years.
""")
PLAIN_SENTENCES = _lines("""
    We need the report by Friday or we're in trouble.
    Can you send me the file when you get a chance?
    The meeting was long and nobody really decided anything.
    I can't come to the party because I have to work.
    Your order will arrive in three to five days.
    This phone is fine but the battery is bad.
    We're closing early today because of the snow.
    I think we should try a different approach.
    The food was okay but it took ages to come.
    Please stop leaving dirty cups in the sink.
    The concert was amazing and I want to go again.
    I'm sorry I forgot to call you back.
    Our team finished the project two days early.
    The park is a nice place to walk your dog.
    You forgot to attach the document.
    It's going to rain all weekend.
    The new menu has more vegetarian dishes.
    I really need a holiday.
""")
ERROR_TEMPLATES = [
    "Fix the grammar in this sentence: {s}",
    'Correct this sentence: "{s}"',
    "What's wrong with this sentence, and how should it be written? {s}",
    "Proofread: {s}",
]
REWORD_TEMPLATES = [
    'Make this sentence sound more professional: "{s}"',
    "Rewrite this more politely: {s}",
    "Say this in simpler words: {s}",
    "Make this sound more exciting: {s}",
    "Paraphrase this sentence: {s}",
    "Rewrite this sentence in three different ways: {s}",
    'How would a pirate say this? "{s}"',
    "Turn this into a question: {s}",
]

REVIEWS = _lines("""
    Arrived quickly and works perfectly. Would buy again.
    The colour looks nothing like the photo and the fabric feels cheap.
    Decent headphones for the price, though the bass is a bit weak.
    The staff were friendly, but our food was cold when it arrived.
    Absolutely love this blender. Smoothies every morning now!
    Broke after two weeks. Customer service never replied to my emails.
    It's fine. Does what it says, nothing special.
    Best pizza in town, and the garden seating is lovely in summer.
    The instructions were confusing and two screws were missing.
    Comfortable shoes, but they run a size small.
    The hotel was spotless and the view from our room was stunning.
    Too expensive for what you get, but the quality is good.
    My kids play with this puzzle every day. Great value.
    The app keeps crashing whenever I try to upload a photo.
    Lovely smell, but the candle only lasted about ten hours.
    Delivery was late, yet the driver was very apologetic and polite.
    I wanted to like this book, but the ending felt rushed.
    Perfect for camping: light, warm and easy to pack.
    The tour guide knew so much and made the whole day fun.
    Not bad, not great. I probably won't order again.
""")
REVIEW_TEMPLATES = [
    'Classify the sentiment of this review as positive, negative or mixed: "{r}"',
    'Is this customer happy? "{r}"',
    "Review: {r}\nSentiment?",
    'What, if anything, is the customer complaining about? "{r}"',
    "Rate this review from 1 (very negative) to 5 (very positive) and explain: {r}",
    'Write a polite reply from the business to this review: "{r}"',
]

HEADLINES = _lines("""
    Local team wins regional cup after dramatic penalty shoot-out
    New study links daily walks to better mood in older adults
    Tech company unveils phone with week-long battery
    City council votes to expand bike lanes downtown
    Popular singer announces surprise world tour
    Bakery chain reports record profits despite rising costs
    Scientists spot new species of frog in rainforest
    Schools to trial four-day week next autumn
    Star striker signs record deal with rival club
    Hospital opens new children's wing after fundraising drive
    Streaming service raises prices for the second time this year
    Astronomers capture clearest image yet of distant galaxy
    Farmers warn of poor harvest after dry summer
    Film about a talking dog tops the box office
    Government announces plan to cut train fares for students
    Chess prodigy, 12, beats grandmaster in exhibition match
    Start-up promises grocery delivery in ten minutes
    Doctors urge people to get their flu jab early
    Museum returns ancient statue to its country of origin
    Marathon runner breaks course record in heatwave
""")
HEADLINE_TEMPLATES = [
    "Which category fits this headline best: sports, politics, science, business, "
    "entertainment or health?\n\n{h}",
    'Headline: "{h}"\nWhat is this news story probably about?',
    "Write the first two sentences of a news article with this headline: {h}",
    "Is this headline good news or bad news? {h}",
    "Rewrite this headline to make it sound more dramatic: {h}",
]

INCOMING_MESSAGES = _lines("""
    Hi! Are you free for coffee on Saturday afternoon?
    Could you send me the slides from yesterday's meeting?
    We're organising a leaving party for Jane next Friday. Can you come?
    Your parcel could not be delivered. Please tell us a good time to try again.
    Hey, can I borrow your car this weekend? Mine is in the garage.
    I'm so sorry, I accidentally broke the vase you lent me.
    Would you be interested in joining our five-a-side football team?
    Hello, we'd like to invite you to speak at our school careers day.
    Are you still selling the bike you advertised?
    The plumber can come on Tuesday between 9 and 12. Does that work?
    Thanks for dinner last night! It was lovely.
    Can you cover my shift on Sunday? I have a family emergency.
    We noticed your rent payment is two days late. Is everything okay?
    Hi, I'm your new neighbour from number 12. Just wanted to say hello!
""")
REPLY_TEMPLATES = [
    'Write a reply to this message: "{m}"',
    "Help me respond politely to this: {m}",
    'Draft a short reply that says no, kindly: "{m}"',
    "Reply to this text in a friendly, casual way: {m}",
    'Write a yes reply to this, and ask one follow-up question: "{m}"',
]

CODE_SNIPPETS = [
    "def f(xs):\n    return [x * 2 for x in xs if x > 0]",
    "for i in range(1, 6):\n    print('*' * i)",
    "const total = prices.reduce((sum, p) => sum + p, 0);",
    "def greet(name=None):\n    if name:\n        return 'Hello, ' + name\n    return 'Hello!'",
    "words = text.split()\nprint(len(set(words)))",
    "let n = 10;\nwhile (n > 0) {\n  console.log(n);\n  n -= 3;\n}",
    "def avg(nums):\n    return sum(nums) / len(nums)",
    "SELECT name FROM users WHERE age > 30 ORDER BY name;",
    "d = {}\nfor w in words:\n    d[w] = d.get(w, 0) + 1",
    "function isEven(n) {\n  return n % 2 == 0;\n}",
    "x = [3, 1, 2]\nx.sort()\nprint(x[-1])",
    "s = 'hello world'\nprint(s.title())",
    "def last(xs):\n    return xs[len(xs)]",
    "i = 0\nwhile i < 5:\n    print(i)",
    "for (int i = 0; i <= 10; i += 2) {\n    System.out.println(i);\n}",
    "nums = [1, 2, 3]\nfor n in nums:\n    nums.append(n * 2)",
    "def add_item(item, items=[]):\n    items.append(item)\n    return items",
    'echo "Hello, $USER"',
    "print(sum(range(1, 11)))",
    "if (score > 90) grade = 'A';\nelse if (score > 80) grade = 'B';\nelse grade = 'C';",
]
SNIPPET_TEMPLATES = [
    "What does this code do?\n\n```\n{c}\n```",
    "Is there a bug in this code? If so, how do I fix it?\n\n```\n{c}\n```",
    "Explain this code line by line:\n\n```\n{c}\n```",
    "Can you add comments to this code?\n\n```\n{c}\n```",
    "What will this print or return? Explain.\n\n```\n{c}\n```",
    "How could I improve this code?\n\n```\n{c}\n```",
]

# ----------------------------------------------------------------------------------------------
# Procedural prompts with random numbers and names.

NAMES = _lines("""
    Amira
    Ben
    Chloe
    Diego
    Ella
    Farid
    Grace
    Hiro
    Isla
    Jonas
    Kemi
    Leo
    Mei
    Nina
    Omar
    Priya
    Quinn
    Rosa
    Sami
    Tara
    Uma
    Victor
    Wen
    Yusuf
    Zoe
""")
ITEMS = _lines("""
    notebooks
    apples
    movie tickets
    cupcakes
    pencils
    bus tickets
    plant pots
    bags of rice
    tins of paint
    T-shirts
    bars of soap
    packs of batteries
""")
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = _lines("""
    January
    March
    April
    May
    July
    August
    October
    December
""")


def _money(rng: random.Random, lo: float, hi: float) -> str:
    return f"{rng.uniform(lo, hi):.2f}"


def _word_problem(rng: random.Random) -> str:
    name, other = rng.sample(NAMES, 2)
    item = rng.choice(ITEMS)
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    n, m = rng.randint(20, 400), rng.randint(3, 15)
    slices = rng.choice([8, 10, 12, 16])
    choices: list[Callable[[], str]] = [
        lambda: (
            f"{name} buys {a} {item} at ${_money(rng, 0.5, 9)} each and pays with a "
            f"${rng.choice([20, 50, 100])} note. How much change should {name} get?"
        ),
        lambda: (
            f"A recipe for {a} people needs {n} grams of flour. How much flour do I need for "
            f"{b} people?"
        ),
        lambda: (
            f"If I save ${m} a week, how many weeks will it take me to save "
            f"${n * rng.randint(2, 6)}?"
        ),
        lambda: (
            f"{name} is {a + 5} years old and {other} is {b} years older. How old will {other} "
            f"be in {m} years?"
        ),
        lambda: (
            f"A jacket costs ${n}. It's on sale for {rng.choice([10, 15, 20, 25, 30, 40])}% off. "
            f"What's the sale price?"
        ),
        lambda: (
            f"Dinner for {a} people came to ${_money(rng, 40, 300)}. We want to add a "
            f"{rng.choice([10, 12, 15, 20])}% tip and split it evenly. How much does each person "
            f"pay?"
        ),
        lambda: (
            f"A film starts at {rng.randint(1, 9)}:{rng.choice([0, 15, 20, 30, 45]):02d} p.m. and "
            f"lasts {rng.randint(85, 175)} minutes. What time does it finish?"
        ),
        lambda: (
            f"I walk at about {rng.choice([4, 5, 6])} km per hour. How long will it take me to "
            f"walk {rng.randint(3, 25)} km?"
        ),
        lambda: (
            f"My car uses {rng.randint(5, 9)} litres of fuel per 100 km. How much fuel do I need "
            f"for a {n * 2} km trip?"
        ),
        lambda: (
            f"A wall is {a} metres wide and {rng.randint(2, 4)} metres tall. One litre of paint "
            f"covers {rng.randint(8, 14)} square metres. How many litres do I need for two coats?"
        ),
        lambda: (
            f"A book has {n + 100} pages. If {name} reads {m * 2} pages a day, how many days will "
            f"it take to finish?"
        ),
        lambda: (
            f"I earn ${m + 5} an hour and work {a + 20} hours a week. How much do I earn in "
            f"{b} weeks?"
        ),
        lambda: (
            f"A pizza is cut into {slices} slices. {rng.randint(2, slices // 2 - 1)} friends eat "
            f"2 slices each. How many slices are left?"
        ),
        lambda: (
            f"The price of a coffee went from ${_money(rng, 2, 3)} to ${_money(rng, 3.1, 4.5)}. "
            f"By what percentage did it go up?"
        ),
        lambda: (
            f"Squash is mixed with water in a ratio of 1:{a}. How much water do I need for "
            f"{m * 10} ml of squash?"
        ),
        lambda: (
            f"A rectangular garden is {a + 3} m by {b + 1} m. How much fencing do I need to go "
            f"all the way round it?"
        ),
        lambda: f"How many dozen is {n} eggs, and how many eggs are left over?",
        lambda: (
            f"A hall has {a + 8} rows of {b + 10} seats. {n} seats are taken. How many are free?"
        ),
        lambda: (
            f"I put ${n * 10} in a savings account paying {rng.choice([2, 3, 4, 5])}% simple "
            f"interest a year. How much interest will I have after {rng.randint(2, 6)} years?"
        ),
        lambda: (
            f"I'm thinking of a number. If I double it and add {m}, I get {2 * n + m}. What is "
            f"the number?"
        ),
        lambda: (
            f"{name} has {4 * n} stickers and gives a quarter of them to {other}. How many does "
            f"{name} have left?"
        ),
        lambda: (
            f"A school trip needs {n} seats. Each bus holds {rng.choice([40, 45, 50, 52])} "
            f"people. How many buses are needed?"
        ),
        lambda: (
            f"Three friends share ${(a + b + m) * rng.randint(5, 40)} in the ratio {a}:{b}:{m}. "
            f"How much does each get?"
        ),
        lambda: (
            f"A tap fills a {n} litre tank at {m} litres per minute. How long until it is full?"
        ),
        lambda: (
            f"{name} ran {rng.randint(3, 12)} km on Monday, {rng.randint(3, 12)} km on Wednesday "
            f"and {rng.randint(3, 12)} km on Saturday. What's the total, and the average per run?"
        ),
        lambda: (
            f"A phone costs ${n + 200} up front, or ${m * 3} a month for 24 months. Which is "
            f"cheaper overall, and by how much?"
        ),
    ]
    return rng.choice(choices)()


def _terse_maths(rng: random.Random) -> str:
    a, b = rng.randint(12, 99), rng.randint(12, 99)
    if {a, b} == {17, 23}:
        a += 1
    big = rng.randint(100, 9999)
    choices: list[Callable[[], str]] = [
        lambda: f"what's {a} x {b}?",
        lambda: f"{big} + {rng.randint(100, 9999)} = ?",
        lambda: f"{rng.choice([5, 10, 15, 20, 25, 30, 40, 60, 75])}% of {big}?",
        lambda: f"square root of {rng.randint(4, 40) ** 2}?",
        lambda: f"{big} divided by {rng.randint(3, 17)}, to two decimal places?",
        lambda: f"Is {big} divisible by {rng.choice([3, 4, 6, 7, 9, 11])}? How can I tell?",
        lambda: f"Round {big}.{rng.randint(10, 99)} to the nearest ten and the nearest hundred.",
        lambda: f"What is {a} squared?",
        lambda: f"{big} - {rng.randint(10, big - 1)}?",
        lambda: f"Write {a}/{b + 100} as a percentage.",
        lambda: f"What's {a * b} divided by {a}?",
        lambda: f"Is {rng.randint(50, 300)} a prime number?",
        lambda: f"What are the factors of {rng.choice([24, 36, 48, 60, 72, 84, 90, 96, 100])}?",
        lambda: f"Simplify the fraction {a * 2}/{b * 2}.",
        lambda: f"What's {rng.randint(2, 9)} to the power of {rng.randint(2, 5)}?",
        lambda: (
            f"Work out ({a} + {rng.randint(2, 9)}) x {rng.randint(2, 9)} - {rng.randint(1, 20)}, "
            f"showing the order of operations."
        ),
    ]
    return rng.choice(choices)()


CONVERSIONS: list[tuple[str, str, int, int]] = [
    ("kilometres", "miles", 1, 200),
    ("miles", "kilometres", 1, 100),
    ("kilograms", "pounds", 1, 120),
    ("pounds", "kilograms", 1, 250),
    ("degrees Celsius", "degrees Fahrenheit", -20, 45),
    ("degrees Fahrenheit", "degrees Celsius", 0, 110),
    ("cups", "millilitres", 1, 6),
    ("ounces", "grams", 1, 32),
    ("feet", "metres", 1, 30),
    ("metres", "feet", 1, 100),
    ("inches", "centimetres", 1, 60),
    ("litres", "gallons", 1, 80),
    ("hours", "minutes", 2, 30),
    ("days", "hours", 2, 30),
    ("weeks", "days", 2, 52),
    ("minutes", "seconds", 2, 90),
    ("centimetres", "inches", 5, 200),
    ("tablespoons", "teaspoons", 1, 12),
    ("square metres", "square feet", 5, 120),
    ("gigabytes", "megabytes", 1, 64),
]
CONVERSION_TEMPLATES = [
    "convert {v} {u1} to {u2}",
    "How many {u2} is {v} {u1}?",
    "{v} {u1} in {u2}?",
    "What is {v} {u1} in {u2}? Show the calculation.",
    "I need to know {v} {u1} in {u2}, roughly.",
]


def _conversion(rng: random.Random) -> str:
    u1, u2, lo, hi = rng.choice(CONVERSIONS)
    return rng.choice(CONVERSION_TEMPLATES).format(v=rng.randint(lo, hi), u1=u1, u2=u2)


def _time_question(rng: random.Random) -> str:
    h, mins = rng.randint(1, 12), rng.choice([0, 5, 10, 15, 20, 30, 40, 45, 50])
    month = rng.choice(MONTHS)
    d1 = rng.randint(1, 14)
    choices: list[Callable[[], str]] = [
        lambda: (
            f"If it's {h}:{mins:02d} now, what time will it be in {rng.randint(1, 9)} hours and "
            f"{rng.randint(5, 55)} minutes?"
        ),
        lambda: (
            f"What day of the week will it be {rng.randint(3, 100)} days after a "
            f"{rng.choice(WEEKDAYS)}?"
        ),
        lambda: f"How many minutes are there in {rng.randint(2, 48)} hours?",
        lambda: f"How many days are there from {d1} {month} to {d1 + rng.randint(3, 16)} {month}?",
        lambda: f"How many seconds are in {rng.randint(2, 120)} minutes?",
        lambda: (
            f"My flight leaves at {h}:{mins:02d} and I need to be at the airport two hours early. "
            f"The drive takes {rng.randint(25, 95)} minutes. When should I leave home?"
        ),
        lambda: f"If I was born in {rng.randint(1950, 2015)}, how old am I this year (2025)?",
        lambda: (
            f"A meeting runs from {h}:{mins:02d} to {h % 12 + 1}:{rng.choice([0, 15, 30]):02d}. "
            f"How long is it?"
        ),
        lambda: f"How many weeks and days is {rng.randint(10, 200)} days?",
    ]
    return rng.choice(choices)()


SORT_WORDS = _lines("""
    banana
    zebra
    kettle
    orange
    apple
    window
    garden
    lemon
    rocket
    pencil
    mountain
    river
    cloud
    tiger
    violin
    honey
    engine
    quilt
    yellow
    desk
""")


def _number_list(rng: random.Random) -> str:
    nums = ", ".join(str(rng.randint(1, 250)) for _ in range(rng.randint(5, 9)))
    words = ", ".join(rng.sample(SORT_WORDS, rng.randint(5, 8)))
    choices = [
        f"Sort these numbers from smallest to largest: {nums}",
        f"What is the average of {nums}?",
        f"Find the median of these numbers: {nums}",
        f"Which is the biggest number here, and which is the smallest? {nums}",
        f"What's the sum of {nums}?",
        f"Put these words in alphabetical order: {words}",
        f"Which of these words is the longest? {words}",
        f"Sort these words by length, shortest first: {words}",
        f"How many of these numbers are even? {nums}",
    ]
    return rng.choice(choices)


EVENTS = _lines("""
    dentist appointment
    team meeting
    piano lesson
    coffee catch-up
    project review
    football practice
    haircut
    parents' evening
    book club
    job call
""")
PLACES = _lines("""
    the library on King Street
    Room 204
    the cafe by the station
    the community centre
    the main office
    the park entrance
    Zoom
    the Greenway sports hall
    Dr Patel's clinic
    the corner bakery
""")


def _extraction(rng: random.Random) -> str:
    name, other = rng.sample(NAMES, 2)
    event, place = rng.choice(EVENTS), rng.choice(PLACES)
    day = rng.choice(WEEKDAYS)
    time = f"{rng.randint(8, 11) if rng.random() < 0.5 else rng.randint(1, 6)}:"
    time += f"{rng.choice([0, 15, 30, 45]):02d}"
    order_no = rng.randint(1000, 99999)
    qty, item = rng.randint(2, 9), rng.choice(ITEMS)
    messages = [
        f"Hi {name}, can we move our {event} to {day} at {time} at {place}? Thanks, {other}",
        f"Reminder: {event} with {name} on {day}, {time}, at {place}. Please bring your notes.",
        f"Order #{order_no}: {qty} {item}, total ${_money(rng, 5, 120)}, to be delivered to "
        f"{name} {rng.choice(['Smith', 'Okafor', 'Garcia', 'Chen', 'Novak', 'Haddad'])} on "
        f"{day}.",
        f"{other} called: the {event} is cancelled this {day}. She'll email {name} a new time.",
    ]
    msg = rng.choice(messages)
    templates = [
        f'Extract the day, time and place from this message: "{msg}"',
        f"From this text, pull out who, what, when and where as a short list:\n\n{msg}",
        f"Turn this into a JSON object with the important details:\n\n{msg}",
        f"Read this message and tell me what I need to do: {msg}",
        f'Which names appear in this text? "{msg}"',
        f"Write a calendar entry (title, day, time, place) from this: {msg}",
    ]
    return rng.choice(templates)


# ----------------------------------------------------------------------------------------------


_COUNTS = [
    (3, "three"),
    (4, "four"),
    (5, "five"),
    (6, "six"),
    (7, "seven"),
    (8, "eight"),
    (10, "ten"),
]


def _family_prompts(rng: random.Random, fam: Family) -> list[str]:
    out = []
    for filler in fam.fillers:
        for tpl in rng.sample(fam.templates, min(fam.k, len(fam.templates))):
            if isinstance(filler, tuple):
                p = tpl.format(a=filler[0], b=filler[1])
            else:
                n, word = rng.choice(_COUNTS)
                n_text = str(n) if rng.random() < 0.6 else word
                p = tpl.format(x=filler, n=n_text, N=n_text.capitalize())
            out.append(_stylise(rng, p) if fam.styled else p)
    return out


def _combo_prompts(rng: random.Random) -> list[str]:
    out = []
    for task in CODE_TASKS:
        for lang in rng.sample(CODE_LANGS, 2):
            out.append(rng.choice(CODE_TEMPLATES).format(lang=lang, task=task))
    stories = next(f for f in FAMILIES if f.name == "stories").fillers
    for subject in next(f for f in FAMILIES if f.name == "poem_subjects").fillers:
        out.append(f"Write {rng.choice(POEM_FORMS)} about {subject}.")
    for subject in rng.sample(stories, len(stories) // 2):
        out.append(f"Write {rng.choice(POEM_FORMS)} about {subject}.")
    for phrase in TRANSLATE_PHRASES:
        for lang in rng.sample(TRANSLATE_LANGS, 2):
            out.append(rng.choice(TRANSLATE_TEMPLATES).format(p=phrase, lang=lang))
    for passage in PASSAGES:
        for tpl in rng.sample(PASSAGE_TASKS, 4):
            out.append(tpl.format(p=passage))
    for s in ERROR_SENTENCES:
        for tpl in rng.sample(ERROR_TEMPLATES, 2):
            out.append(tpl.format(s=s))
    for s in PLAIN_SENTENCES:
        for tpl in rng.sample(REWORD_TEMPLATES, 3):
            out.append(tpl.format(s=s))
    for r in REVIEWS:
        for tpl in rng.sample(REVIEW_TEMPLATES, 2):
            out.append(tpl.format(r=r))
    for h in HEADLINES:
        for tpl in rng.sample(HEADLINE_TEMPLATES, 2):
            out.append(tpl.format(h=h))
    for m in INCOMING_MESSAGES:
        for tpl in rng.sample(REPLY_TEMPLATES, 2):
            out.append(tpl.format(m=m))
    for c in CODE_SNIPPETS:
        for tpl in rng.sample(SNIPPET_TEMPLATES, 2):
            out.append(tpl.format(c=c))
    return out


# (generator, how many to draw per seed)
PROCEDURAL: list[tuple[Callable[[random.Random], str], int]] = [
    (_word_problem, 220),
    (_terse_maths, 90),
    (_conversion, 90),
    (_time_question, 70),
    (_number_list, 60),
    (_extraction, 90),
]


def _avoided(prompt: str) -> bool:
    low = prompt.lower()
    return any(term in low for term in _AVOID)


def wide_prompts(seed: int = 0) -> list[str]:
    """Distinct prompts from all families, combined and shuffled by `seed`; never a benchmark
    prompt, nor one touching a benchmark topic (`_AVOID`)."""
    rng = random.Random(seed)
    out: list[str] = []
    for fam in FAMILIES:
        out.extend(_family_prompts(rng, fam))
    out.extend(_combo_prompts(rng))
    for gen, count in PROCEDURAL:
        out.extend(gen(rng) for _ in range(count))
    bench = set(_benchmark_prompts())
    out = [p for p in dict.fromkeys(out) if p not in bench and not _avoided(p)]
    rng.shuffle(out)
    return out


def family_count() -> int:
    """Template families plus the combined and procedural ones (for reporting)."""
    # code tasks, poem forms, translation, passages, grammar fixes, rewording, reviews,
    # headlines, message replies, code snippets (see `_combo_prompts`)
    combined = 10
    return len(FAMILIES) + combined + len(PROCEDURAL)


if __name__ == "__main__":
    prompts = wide_prompts()
    print(f"{len(prompts)} prompts from {family_count()} families")
    for p in random.Random(1).sample(prompts, 15):
        print("-", p.replace("\n", " / "))
