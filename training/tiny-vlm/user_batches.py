"""Training samples on user scenes: one picture size per batch (so every image has the same token grid
and the vision attention stays batched), each picture drawn once and asked four questions (drawing is
most of a worker's time: about 48 pictures per batch of 256; run 5's larger inputs made a picture about
2x dearer, and 4 questions instead of 3 buy back a quarter of it)."""
from dialogues import DEFAULT_SYSTEM, OTHER_SYSTEMS, _pick, text_question
from user_dialogues import user_image_question, user_text_question
from user_raster import model_image, sample_look, user_kind_labels
from user_scenes import sample_size, sample_user_scene

P_IMAGE = 0.75
QUESTIONS_PER_PICTURE = 4


def _system(rng):
    return DEFAULT_SYSTEM if rng.random() < 0.9 else _pick(rng, OTHER_SYSTEMS)


def _image_sample(rng, scene, pixels, labels):
    cat, q, a = user_image_question(rng, scene)
    turns = [(q, a)]
    if rng.random() < 0.15:
        _, q2, a2 = user_image_question(rng, scene)
        turns.append((q2, a2))
    return {"category": cat, "image": scene, "pixels": pixels, "kind_labels": labels,
            "image_after_text": bool(rng.random() < 0.1), "system": _system(rng), "turns": turns}


def _text_sample(rng):
    # half the shipped text side (facts, chat, no-image), half refusals and arithmetic bounds
    cat, q, a = text_question(rng) if rng.random() < 0.5 else user_text_question(rng)
    return {"category": cat, "image": None, "image_after_text": False, "system": _system(rng), "turns": [(q, a)]}


def sample_user_batch(rng, batch_size, kind_labels=False):
    size = sample_size(rng)
    out = []
    while len(out) < batch_size:
        if rng.random() >= P_IMAGE:
            out.append(_text_sample(rng))
            continue
        scene = sample_user_scene(rng, size)
        pixels = model_image(scene, sample_look(rng))
        labels = user_kind_labels(scene) if kind_labels else None
        for _ in range(QUESTIONS_PER_PICTURE):
            if len(out) < batch_size:
                out.append(_image_sample(rng, scene, pixels, labels))
    return out
