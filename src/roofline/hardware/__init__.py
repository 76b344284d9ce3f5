"""Machines: the catalogue of vendor figures, and the profile `roofline probe` measures on this
one."""
