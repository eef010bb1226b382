import unittest

from textkit.text import slugify, title_case, word_count


class SlugifyTests(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(slugify("Hello World"), "hello-world")

    def test_collapses_and_trims_dashes(self):
        self.assertEqual(slugify("  Hello,   World!  "), "hello-world")


class WordCountTests(unittest.TestCase):
    def test_counts_whitespace_separated_words(self):
        self.assertEqual(word_count("one two  three\nfour"), 4)

    def test_empty(self):
        self.assertEqual(word_count("   "), 0)


class TitleCaseTests(unittest.TestCase):
    def test_apostrophes(self):
        self.assertEqual(title_case("don't stop me now"), "Don't Stop Me Now")
