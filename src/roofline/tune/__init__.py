"""Launch engines with one configuration after another, measure each, keep the bit-exact ones."""
