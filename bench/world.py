"""A seeded synthetic memory world for the retrieval benchmark.

Planted facts about people among distractors over eight simulated weeks,
and questions of five kinds:

- static: a fact stated once ("Where does Ana live?")
- updated: an old value, later superseded ("... has moved to Oslo")
- important: an importance-9 event weeks ago, buried under recent trivia
  about the same topic (importance 1-3)
- near_duplicate: the same kind of fact about another person is also stored
- never: the question's fact was never mentioned (nothing should match well)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WEEKS = 8

PEOPLE = (
    "Ana Berg", "Bruno Costa", "Chloe Dubois", "Dmitri Orlov", "Elena Ruiz", "Farid Haddad",
    "Greta Lind", "Hiro Tanaka", "Ines Moreau", "Jonas Weber", "Kofi Mensah", "Lena Novak",
    "Marco Rossi", "Nadia Petrova", "Oscar Silva", "Priya Nair", "Quentin Roy", "Rosa Lopez",
    "Sven Olsen", "Tara Walsh", "Umar Saleh", "Vera Kovac", "Wen Li", "Yusuf Demir",
)  # fmt: skip

CITIES = ("Lisbon", "Oslo", "Nairobi", "Osaka", "Montreal", "Krakow", "Valencia", "Tallinn",
          "Perth", "Bogota", "Ghent", "Porto")  # fmt: skip
JOBS = ("nurse", "carpenter", "software engineer", "chef", "pilot", "librarian", "architect",
        "electrician", "pharmacist", "translator")  # fmt: skip
PETS = (("dog", "Biscuit"), ("cat", "Miso"), ("parrot", "Kiwi"), ("rabbit", "Clover"),
        ("tortoise", "Sheldon"), ("dog", "Pepper"), ("cat", "Luna"))  # fmt: skip
SISTERS = ("Maya", "Lucia", "Hanna", "Sofia", "Irene", "Nora", "Alma", "Petra")
FOODS = ("mushroom risotto", "pad thai", "lentil soup", "sushi", "paella", "dumplings",
         "shakshuka", "pierogi")  # fmt: skip
CARS = ("red hatchback", "blue pickup truck", "green station wagon", "silver electric sedan",
        "yellow minivan", "black convertible")  # fmt: skip

# kind: (fact template, question template, values)
ATTRIBUTES: dict[str, tuple[str, str, tuple[object, ...]]] = {
    "city": ("{p} lives in {v}.", "Where does {p} live?", CITIES),
    "job": ("{p} works as a {v}.", "What is {p}'s job?", JOBS),
    "pet": ("{p} has a pet {v[0]} named {v[1]}.", "What pet does {p} have?", PETS),
    "sister": ("{p}'s sister is called {v}.", "What is the name of {p}'s sister?", SISTERS),
    "food": ("{p}'s favourite food is {v}.", "What is {p}'s favourite food?", FOODS),
    "car": ("{p} drives a {v}.", "What car does {p} drive?", CARS),
}
UPDATE = {
    "city": "{p} has moved to {v} and lives there now.",
    "job": "{p} changed careers and now works as a {v}.",
    "car": "{p} sold the old car and now drives a {v}.",
    "food": "{p} says their favourite food these days is {v}.",
}
NEVER = (
    "What is {p}'s blood type?",
    "Which university did {p} attend?",
    "What instrument does {p} play?",
    "What is {p}'s shoe size?",
)

# Important events (importance 9) and recent trivia on the same topic (1-3).
IMPORTANT = (
    (
        "What should I keep in mind about {p}'s health?",
        "{p} was diagnosed with type 1 diabetes and must check blood sugar daily.",
        ("{p} felt a bit tired this afternoon.", "{p} went for a short walk to stretch.",
         "{p} drank herbal tea for a scratchy throat.", "{p} had a mild headache after work.",
         "{p} took a nap after lunch.", "{p} skipped the gym today.",
         "{p} said their back felt stiff this morning."),
    ),
    (
        "What big thing happened in {p}'s family?",
        "{p}'s father passed away, and {p} is grieving.",
        ("{p} called a cousin to chat about the weekend.", "{p} had dinner with family on Sunday.",
         "{p} helped a nephew with homework.", "{p} sent a birthday card to an aunt.",
         "{p}'s family group chat was busy with photos.", "{p} visited relatives for coffee.",
         "{p} talked about family recipes."),
    ),
    (
        "What is the most significant news about {p}'s career?",
        "{p} was promoted to director of the whole engineering department.",
        ("{p} answered work emails all morning.", "{p} had a short meeting with a colleague.",
         "{p} updated a spreadsheet at the office.", "{p} worked late to finish a report.",
         "{p} complained about the office printer.", "{p} took a work call during lunch.",
         "{p} reorganised the desk at work."),
    ),
)  # fmt: skip

FILLER = (
    "It rained most of the afternoon.", "The team meeting moved to Thursday.",
    "The coffee machine in the kitchen is broken again.", "Traffic was heavy on the way home.",
    "A new bakery opened around the corner.", "The weather forecast says snow this weekend.",
    "The library extended its opening hours.", "There was a power cut for ten minutes.",
    "The train was delayed by fifteen minutes.", "Someone left an umbrella in the hallway.",
    "The neighbours were painting their fence.", "The grocery store ran out of oat milk.",
    "A podcast about space exploration was interesting.", "The wifi was slow this evening.",
    "The park was crowded with families.", "A package arrived a day early.",
)  # fmt: skip


@dataclass
class Memory:
    key: str
    text: str
    created_at: datetime
    importance: int


@dataclass
class Question:
    kind: str
    text: str
    answer: str | None  # memory key
    superseded: str | None = None  # memory key of the old value (updated questions)


@dataclass
class World:
    memories: list[Memory] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def _when(rng: random.Random, days_ago_min: float, days_ago_max: float) -> datetime:
    return NOW - timedelta(days=rng.uniform(days_ago_min, days_ago_max))


def build(seed: int, per_kind: int = 4) -> World:
    rng = random.Random(seed)
    world = World()
    people = list(PEOPLE)
    rng.shuffle(people)
    pool = iter(people)
    n = 0

    def add(text: str, at: datetime, importance: int) -> str:
        nonlocal n
        n += 1
        key = f"m{n}"
        world.memories.append(Memory(key, text, at, importance))
        return key

    def fact(p: str, kind: str, value: object, at: datetime, imp: int) -> str:
        return add(ATTRIBUTES[kind][0].format(p=p, v=value), at, imp)

    for _ in range(per_kind):  # static
        p, kind = next(pool), rng.choice(list(ATTRIBUTES))
        key = fact(
            p, kind, rng.choice(ATTRIBUTES[kind][2]), _when(rng, 1, 7 * WEEKS), rng.randint(3, 6)
        )
        for other in rng.sample([k for k in ATTRIBUTES if k != kind], 2):
            fact(
                p,
                other,
                rng.choice(ATTRIBUTES[other][2]),
                _when(rng, 1, 7 * WEEKS),
                rng.randint(2, 7),
            )
        world.questions.append(Question("static", ATTRIBUTES[kind][1].format(p=p), key))
    for _ in range(per_kind):  # updated
        p, kind = next(pool), rng.choice(list(UPDATE))
        old_v, new_v = rng.sample(list(ATTRIBUTES[kind][2]), 2)
        imp = rng.randint(3, 6)
        old = fact(p, kind, old_v, _when(rng, 21, 7 * WEEKS), imp)
        new = add(UPDATE[kind].format(p=p, v=new_v), _when(rng, 1, 14), imp)
        world.questions.append(Question("updated", ATTRIBUTES[kind][1].format(p=p), new, old))
    for question, event, trivia in rng.sample(IMPORTANT, min(per_kind, len(IMPORTANT))) * 2:
        if sum(q.kind == "important" for q in world.questions) >= per_kind:
            break
        p = next(pool)
        key = add(event.format(p=p), _when(rng, 28, 7 * WEEKS), 9)
        for t in rng.sample(trivia, 6):
            add(t.format(p=p), _when(rng, 0.1, 3), rng.randint(1, 3))
        world.questions.append(Question("important", question.format(p=p), key))
    for _ in range(per_kind):  # near duplicates about another person
        p, other, kind = next(pool), next(pool), rng.choice(list(ATTRIBUTES))
        v1, v2 = rng.sample(list(ATTRIBUTES[kind][2]), 2)
        key = fact(p, kind, v1, _when(rng, 1, 7 * WEEKS), rng.randint(3, 7))
        fact(other, kind, v2, _when(rng, 1, 7 * WEEKS), rng.randint(3, 7))
        world.questions.append(Question("near_duplicate", ATTRIBUTES[kind][1].format(p=p), key))
    for _ in range(per_kind):  # never mentioned
        p = next(pool)
        for kind in rng.sample(list(ATTRIBUTES), 2):
            fact(
                p,
                kind,
                rng.choice(ATTRIBUTES[kind][2]),
                _when(rng, 1, 7 * WEEKS),
                rng.randint(2, 7),
            )
        world.questions.append(Question("never", rng.choice(NEVER).format(p=p), None))
    for _ in range(120):
        add(rng.choice(FILLER), _when(rng, 0, 7 * WEEKS), rng.randint(1, 4))
    return world
