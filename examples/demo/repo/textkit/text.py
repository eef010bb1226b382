"""Text helpers."""

import re


def slugify(text):
    text = text.strip().lower()
    return re.sub(r"[^a-z0-9]", "-", text)


def word_count(text):
    raise NotImplementedError("word_count is not written yet")


def title_case(text):
    return text.title()
