"""Benchmarks behind ``livegen bench``: load generators and metrics.

Every benchmark runs its baseline side by side in the same process and
reports medians over several runs and ratios against that baseline.
"""
