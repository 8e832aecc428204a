"""Questions and answers: about a scene (free text and JSON), text-only facts, arithmetic, refusals.

Every sample is {"category", "image": scene|None, "system": str|None, "turns": [(question, answer)]}.
Answers use a small, fixed language so a few-million-parameter model can learn them exactly.
"""
import json
import re

from shapes import BACKGROUND_NAMES, COLOR_NAMES, KINDS, POSITIONS, SIZES

DEFAULT_SYSTEM = "You are a helpful assistant."
OTHER_SYSTEMS = ["You are a concise assistant.", "You answer questions about images.", "Be brief."]
NO_IMAGE = "I don't see an image."
DONT_KNOW = "I don't know."

PLURAL = {"circle": "circles", "square": "squares", "triangle": "triangles", "diamond": "diamonds"}


def scene_json(scene):
    """The JSON answer (examples/shape.schema.json): key order fixed, shapes in reading order."""
    return {
        "count": len(scene["shapes"]),
        "background": scene["background"],
        "shapes": [{"kind": s["kind"], "color": s["color"], "size": s["size"], "position": s["position"]}
                   for s in scene["shapes"]],
    }


def dump_json(obj):
    """Compact, as rapid's structured output emits it (no whitespace, schema key order)."""
    return json.dumps(obj, separators=(",", ":"))


def _where(pos):
    if pos == "center":
        return "in the center"
    if pos in ("left", "right"):
        return "on the " + pos
    return "at the " + pos


def describe(scene):
    sh = scene["shapes"]
    n = len(sh)
    parts = [f"a {s['size']} {s['color']} {s['kind']} {_where(s['position'])}" for s in sh]
    listed = parts[0] if n == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    noun = "shape" if n == 1 else "shapes"
    return f"{n} {noun} on a {scene['background']} background: {listed}."


def _vary(rng, q):
    """Surface variety on the question: casing, trailing punctuation, polite prefixes."""
    r = rng.random()
    if r < 0.12:
        q = q.lower()
    elif r < 0.2 and q.endswith("?"):
        q = q[:-1]
    p = rng.random()
    if p < 0.08:
        q = "Please answer: " + q
    elif p < 0.14:
        q = "Look at the image. " + q
    elif p < 0.18:
        q = "Question: " + q
    return q


def _article(word):
    return "an" if word[0] in "aeiou" else "a"


def _pick(rng, xs):
    return xs[int(rng.integers(len(xs)))]


# ---- image questions --------------------------------------------------------------------------

COUNT_Q = ["How many shapes are there?", "How many shapes are in the image?", "Count the shapes.",
           "How many objects do you see?", "What is the number of shapes?", "How many shapes can you see?",
           "How many things are in the picture?"]
DESCRIBE_Q = ["Describe the image.", "What do you see?", "Describe this picture.", "What is in the image?",
              "What is in this picture?", "Tell me about the image.", "Describe the shapes."]
JSON_Q = ["Describe the image as JSON.", "Return the shapes as JSON.", "Extract the shapes in this image as JSON.",
          "List the shapes in JSON.", "Give me a JSON description of the image.", "Answer in JSON: what shapes are there?",
          "Output JSON with the count, background and shapes.", "Describe the image in JSON format."]
BG_Q = ["What color is the background?", "What is the background color?", "Which color is the background?"]
UNKNOWN_IMG_Q = ["Who made this image?", "What is the name of this picture?", "When was this image made?",
                 "What is the weather like in the image?", "Who is the artist?", "What city is this?",
                 "What is the price of this picture?"]


def image_question(rng, scene, kind=None):
    """One (category, question, answer) about the scene."""
    sh = scene["shapes"]
    cats = ["count", "describe", "json", "background", "color_of", "kind_at", "where", "count_color",
            "count_kind", "exists", "size_of", "unknown_img"]
    weights = [10, 12, 16, 6, 10, 9, 8, 7, 7, 8, 5, 2]
    if kind is None:
        kind = cats[int(rng.choice(len(cats), p=[w / sum(weights) for w in weights]))]
    n = len(sh)
    kinds_present = [s["kind"] for s in sh]
    if kind == "count":
        return kind, _pick(rng, COUNT_Q), str(n)
    if kind == "describe":
        return kind, _pick(rng, DESCRIBE_Q), describe(scene)
    if kind == "json":
        return kind, _pick(rng, JSON_Q), dump_json(scene_json(scene))
    if kind == "background":
        return kind, _pick(rng, BG_Q), scene["background"]
    if kind in ("color_of", "size_of"):
        unique = [k for k in KINDS if kinds_present.count(k) == 1]
        absent = [k for k in KINDS if k not in kinds_present]
        if unique and (not absent or rng.random() < 0.85):
            k = _pick(rng, unique)
            s = next(s for s in sh if s["kind"] == k)
            ans = s["color"] if kind == "color_of" else s["size"]
        elif absent:
            k = _pick(rng, absent)
            ans = f"There is no {k}."
        else:
            return image_question(rng, scene, "count")
        if kind == "color_of":
            q = _pick(rng, [f"What color is the {k}?", f"Which color is the {k}?", f"What is the color of the {k}?"])
        else:
            q = _pick(rng, [f"Is the {k} large or small?", f"How big is the {k}?", f"What size is the {k}?"])
        return kind, q, ans
    if kind == "kind_at":
        if rng.random() < 0.85:
            s = _pick(rng, sh)
            pos, ans = s["position"], f"{_article(s['color'])} {s['color']} {s['kind']}"
        else:
            used = {s["position"] for s in sh}
            free = [p for p in POSITIONS if p not in used]
            pos, ans = _pick(rng, free), "nothing"
        place = _where(pos)
        q = _pick(rng, [f"What is {place}?", f"What shape is {place}?", f"Which shape is {place}?"])
        return kind, q, ans
    if kind == "where":
        unique = [k for k in KINDS if kinds_present.count(k) == 1]
        absent = [k for k in KINDS if k not in kinds_present]
        if unique and (not absent or rng.random() < 0.85):
            k = _pick(rng, unique)
            ans = next(s for s in sh if s["kind"] == k)["position"]
        else:
            k = _pick(rng, absent)
            ans = f"There is no {k}."
        q = _pick(rng, [f"Where is the {k}?", f"Where is the {k} in the image?", f"In which part of the image is the {k}?"])
        return kind, q, ans
    if kind == "count_color":
        c = _pick(rng, [s["color"] for s in sh]) if rng.random() < 0.7 else _pick(rng, COLOR_NAMES)
        ans = str(sum(1 for s in sh if s["color"] == c))
        q = _pick(rng, [f"How many {c} shapes are there?", f"How many shapes are {c}?", f"Count the {c} shapes."])
        return kind, q, ans
    if kind == "count_kind":
        k = _pick(rng, kinds_present) if rng.random() < 0.7 else _pick(rng, KINDS)
        ans = str(kinds_present.count(k))
        q = _pick(rng, [f"How many {PLURAL[k]} are there?", f"How many {PLURAL[k]} do you see?", f"Count the {PLURAL[k]}."])
        return kind, q, ans
    if kind == "exists":
        if rng.random() < 0.5:
            s = _pick(rng, sh)
            c, k = s["color"], s["kind"]
        else:
            c, k = _pick(rng, COLOR_NAMES), _pick(rng, KINDS)
        ans = "yes" if any(s["color"] == c and s["kind"] == k for s in sh) else "no"
        q = _pick(rng, [f"Is there a {c} {k}?", f"Do you see a {c} {k}?", f"Is there a {c} {k} in the image?"])
        return kind, q, ans
    if kind == "unknown_img":
        return kind, _pick(rng, UNKNOWN_IMG_Q), DONT_KNOW
    raise ValueError(kind)


# ---- text-only --------------------------------------------------------------------------------

CAPITALS = [("Japan", "Tokyo"), ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("the United Kingdom", "London"), ("Canada", "Ottawa"), ("Australia", "Canberra"), ("China", "Beijing"),
            ("India", "New Delhi"), ("Russia", "Moscow"), ("Egypt", "Cairo"), ("Brazil", "Brasilia"),
            ("Mexico", "Mexico City"), ("Kenya", "Nairobi"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
            ("Greece", "Athens"), ("Portugal", "Lisbon"), ("Argentina", "Buenos Aires"), ("South Korea", "Seoul"),
            ("Turkey", "Ankara"), ("Poland", "Warsaw"), ("Ireland", "Dublin"), ("the Netherlands", "Amsterdam")]

FACTS = [
    (["How many days are in a week?", "How many days does a week have?"], "7"),
    (["How many legs does a spider have?", "How many legs has a spider?"], "8"),
    (["What color is the sky on a clear day?", "What color is a clear sky?"], "blue"),
    (["What is the largest planet?", "Which planet is the largest?"], "Jupiter"),
    (["What planet do we live on?", "Which planet do we live on?"], "Earth"),
    (["What is the boiling point of water in Celsius?", "At what temperature in Celsius does water boil?"], "100"),
    (["What is the freezing point of water in Celsius?", "At what temperature in Celsius does water freeze?"], "0"),
    (["How many continents are there?", "How many continents does the Earth have?"], "7"),
    (["What is the chemical formula of water?", "What is the formula for water?"], "H2O"),
    (["Who wrote Romeo and Juliet?", "Who is the author of Romeo and Juliet?"], "William Shakespeare"),
    (["How many hours are in a day?", "How many hours does a day have?"], "24"),
    (["How many minutes are in an hour?", "How many minutes does an hour have?"], "60"),
    (["What is the largest ocean?", "Which ocean is the largest?"], "the Pacific Ocean"),
    (["What gas do plants take in?", "Which gas do plants absorb?"], "carbon dioxide"),
    (["What is the opposite of hot?", "What is the opposite of the word hot?"], "cold"),
    (["How many sides does a triangle have?", "How many sides has a triangle?"], "3"),
    (["How many sides does a square have?", "How many sides has a square?"], "4"),
    (["What color do you get by mixing blue and yellow?", "What do blue and yellow make?"], "green"),
    (["What is the first letter of the alphabet?", "Which letter comes first in the alphabet?"], "A"),
    (["How many months are in a year?", "How many months does a year have?"], "12"),
    (["What is the tallest mountain?", "Which mountain is the tallest in the world?"], "Mount Everest"),
    (["What is the closest star to the Earth?", "Which star is closest to the Earth?"], "the Sun"),
    (["How many legs does a cat have?", "How many legs has a cat?"], "4"),
    (["What do bees make?", "What food do bees make?"], "honey"),
]

ARITH = [(17, "*", 23), (12, "+", 35), (9, "*", 8), (100, "-", 37), (144, "/", 12), (25, "*", 4), (56, "+", 78),
         (15, "*", 15), (81, "/", 9), (7, "*", 6), (250, "+", 250), (1000, "-", 1), (13, "*", 11), (64, "/", 8),
         (19, "+", 23), (45, "-", 17), (12, "*", 12), (99, "+", 1), (300, "/", 3), (18, "*", 3), (21, "*", 4),
         (90, "-", 45), (8, "*", 125), (11, "*", 11), (2, "+", 2), (3, "*", 3), (50, "*", 2), (72, "/", 6),
         (33, "+", 44), (16, "*", 16)]
OP_WORDS = {"*": ["times", "multiplied by"], "+": ["plus"], "-": ["minus"], "/": ["divided by"]}
OP_SYMBOLS = {"*": ["*", "x", "×"], "+": ["+"], "-": ["-"], "/": ["/"]}

REFUSE_Q = ["What is my name?", "What am I thinking?", "What will the weather be tomorrow?", "What is my password?",
            "What number am I thinking of?", "Who will win the next election?", "What did I eat for breakfast?",
            "What are the lottery numbers for next week?", "Where are my keys?", "How old am I?",
            "What is in my pocket?", "What time is it now?"]
CHAT = [
    (["Hello", "Hi", "Hello!", "Hi there", "Hey"], "Hello! Send me an image of shapes and ask me about it."),
    (["Who are you?", "What are you?", "What is your name?"], "I am a tiny vision-language model. I answer questions about images of shapes."),
    (["What can you do?", "How can you help me?", "Help"], "I can count and describe shapes in an image, answer in JSON, and answer a few simple questions."),
    (["Thank you", "Thanks!", "Thanks"], "You're welcome!"),
]


def arith_value(a, op, b):
    return {"*": a * b, "+": a + b, "-": a - b, "/": a // b}[op]


def arith_question(rng, a, op, b):
    sym = _pick(rng, OP_SYMBOLS[op])
    word = _pick(rng, OP_WORDS[op])
    forms = [f"{a}{sym}{b}", f"{a} {sym} {b}", f"What is {a}{sym}{b}?", f"What is {a} {sym} {b}?",
             f"What is {a} {word} {b}?", f"Calculate {a} {sym} {b}.", f"{a} {sym} {b} =", f"Compute {a}{sym}{b}",
             f"How much is {a} {word} {b}?"]
    return _pick(rng, forms)


def capital_question(rng, country):
    return _pick(rng, [f"What is the capital of {country}?", f"What is the capital city of {country}?",
                       f"Which city is the capital of {country}?", f"Name the capital of {country}."])


def text_question(rng, kind=None):
    cats = ["capital", "fact", "arith", "refuse", "chat", "no_image"]
    weights = [7, 7, 8, 3, 2, 3]
    if kind is None:
        kind = cats[int(rng.choice(len(cats), p=[w / sum(weights) for w in weights]))]
    if kind == "capital":
        country, city = _pick(rng, CAPITALS)
        return "fact", _vary(rng, capital_question(rng, country)), city
    if kind == "fact":
        qs, a = _pick(rng, FACTS)
        return "fact", _vary(rng, _pick(rng, qs)), a
    if kind == "arith":
        a, op, b = _pick(rng, ARITH)
        return "arith", arith_question(rng, a, op, b), str(arith_value(a, op, b))
    if kind == "refuse":
        return "refuse", _vary(rng, _pick(rng, REFUSE_Q)), DONT_KNOW
    if kind == "chat":
        qs, a = _pick(rng, CHAT)
        return "chat", _pick(rng, qs), a
    if kind == "no_image":
        q = _pick(rng, COUNT_Q + DESCRIBE_Q + JSON_Q + BG_Q + ["What color is the circle?", "Where is the square?"])
        return "no_image", _vary(rng, q), NO_IMAGE
    raise ValueError(kind)


def sample_dialogue(rng, scene_fn, p_image=0.75):
    """A training sample. scene_fn(rng) returns a fresh scene."""
    r = rng.random()
    system = DEFAULT_SYSTEM if r < 0.9 else _pick(rng, OTHER_SYSTEMS)
    if rng.random() < p_image:
        scene = scene_fn(rng)
        cat, q, a = image_question(rng, scene)
        turns = [(_vary(rng, q), a)]
        if rng.random() < 0.15:
            _, q2, a2 = image_question(rng, scene)
            turns.append((_vary(rng, q2), a2))
        return {"category": cat, "image": scene, "image_after_text": bool(rng.random() < 0.1),
                "system": system, "turns": turns}
    cat, q, a = text_question(rng)
    turns = [(q, a)]
    if rng.random() < 0.05:
        _, q2, a2 = text_question(rng)
        turns.append((q2, a2))
    return {"category": cat, "image": None, "image_after_text": False, "system": system, "turns": turns}


def all_answer_words():
    """Every word the model is taught to say: the garbage detector's dictionary."""
    words = set()
    texts = [NO_IMAGE, DONT_KNOW] + [a for _, a in CHAT] + [a for _, a in FACTS] + [c for _, c in CAPITALS]
    texts += KINDS + COLOR_NAMES + BACKGROUND_NAMES + SIZES + POSITIONS + list(PLURAL.values())
    texts += ["there is no a an on at in the of and shape shapes background nothing yes no count kind color size "
              "position"]
    for t in texts:  # runs of letters, as the checker splits an output ("H2O" -> H, O)
        words.update(w.lower() for w in re.findall(r"[A-Za-z]+", t))
    return words
