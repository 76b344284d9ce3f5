"""The sub-command modules, each with `register(app)`, in the order `roofline --help` lists."""

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
