"""Figures, gates, results, reports and comparisons of runs."""
