"""The `roofline` command. Each sub-command lives in its own module and registers itself here.

Modules in this package import only typer, rich and the package they call; anything heavy
(torch, numba, the HTTP stack) is imported inside the command function that needs it, so that
`roofline ceiling` answers in well under a second.
"""

from __future__ import annotations

import sys

import typer

from roofline.cli import commands
from roofline.errors import UserError

app = typer.Typer(
    name="roofline",
    help="How fast can this model decode on this machine (ceiling), how fast does an engine "
    "really go (bench), and what closes the gap.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _group() -> None:
    """Keep `roofline` a command group even when only one sub-command is registered."""


for _register in commands.REGISTRARS:
    _register(app)


def run() -> None:
    """Console-script entry point: one clear line and exit code 2 for any mistake the user can
    fix."""
    try:
        app(standalone_mode=False)
    except UserError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except Exception as e:  # click usage errors arrive here in non-standalone mode
        # typer >= 0.2x vendors its own click, so test for the interface, not for click's class
        if callable(getattr(e, "format_message", None)) and isinstance(
            getattr(e, "exit_code", None), int
        ):
            if not e.format_message().strip():
                # `roofline` (or `roofline hardware`) alone: click printed the help, and has nothing
                # to add
                sys.exit(e.exit_code)
            ctx = getattr(e, "ctx", None)
            where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            typer.echo(f"error: {e.format_message()}{where}", err=True)
            sys.exit(e.exit_code)
        raise
