"""Tuning: run an engine in one configuration after another, bench each, keep the exact ones."""
