import unittest

from textkit.stats import mean, median


class MeanTests(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)

    def test_mean_of_nothing_is_zero(self):
        self.assertEqual(mean([]), 0.0)


class MedianTests(unittest.TestCase):
    def test_odd(self):
        self.assertEqual(median([3, 1, 2]), 2)

    def test_even_averages_the_middle_pair(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)
