"""Analyses: pure functions from timelines and measurements to numbers and verdicts."""
