import unittest

from textkit.stats import mean, median, spread


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


class SpreadTests(unittest.TestCase):
    def test_spread(self):
        self.assertEqual(spread([3, 9, 4]), 6)

    def test_spread_of_nothing_is_zero(self):
        self.assertEqual(spread([]), 0)
