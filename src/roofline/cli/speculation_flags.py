"""The speculative-decoding flags of `roofline generate` and `roofline serve`, generated from
`roofline.speculation.SpecOptions`: one typer option per field, with its flag, default, range and
help, so that a new option or proposer needs no edit here.

    @speculation_flags
    def serve(..., speculation: SpecOptions = SpecOptions(), ...): ...

The command sees one `speculation` argument; its place in the signature is where the flags go.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Annotated, Any

import typer

from roofline.errors import UserError
from roofline.speculation import SpecOptions, option_help, option_type, options

_PREFIX = "speculation_"  # the flags' parameter names: no clash with the command's own


def _typer_option(name: str) -> Any:
    opt = options()[name]
    names = f"--{opt.flag}/--{opt.off_flag}" if option_type(name) is bool else f"--{opt.flag}"
    return typer.Option(names, min=opt.minimum, help=option_help(name))


def speculation_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` with its `speculation: SpecOptions` parameter replaced by one flag per field; the
    wrapper builds the SpecOptions (a UserError naming the flag when the values do not fit)."""
    signature = inspect.signature(command, eval_str=True)
    flags = [
        inspect.Parameter(
            _PREFIX + f.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=f.default,
            annotation=Annotated[option_type(f.name), _typer_option(f.name)],
        )
        for f in fields(SpecOptions)
    ]
    params: list[inspect.Parameter] = []
    for p in signature.parameters.values():
        if p.name == "speculation":
            params += flags
        else:
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        values = {f.name: kwargs.pop(_PREFIX + f.name) for f in fields(SpecOptions)}
        return command(**kwargs, speculation=spec_options(**values))

    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


def spec_options(**values: Any) -> SpecOptions:
    """SpecOptions from the flags' values; a UserError naming the flag when they do not fit
    together."""
    try:
        return SpecOptions(**values)
    except ValueError as e:
        field = str(e).split(" ", 1)[0]
        opt = options().get(field)
        raise UserError(f"--{opt.flag if opt else field}: {e}") from None
