"""Tuning: launch an engine with one configuration after another, measure it with bench, keep the
exact ones."""
