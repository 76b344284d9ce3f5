"""The sub-command modules, in the order `roofline --help` lists them. Each exposes
`register(app)`."""

from __future__ import annotations

from roofline.cli import bench, ceiling, generate, probe, report, serve, tune

REGISTRARS = [
    ceiling.register,  # ceiling, hardware list, models list
    probe.register,  # probe
    bench.register,  # bench
    generate.register,  # generate
    serve.register,  # serve
    tune.register,  # tune
    report.register,  # report
]
