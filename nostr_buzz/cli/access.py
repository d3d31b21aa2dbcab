"""What a command that talks to relays was given, as one parameter: ``--relay``, ``--timeout``,
``--key``, ``--bunker`` (when it signs) and ``--config``.

A command declares a keyword-only parameter of type :data:`Relays` or :data:`SigningRelays`;
:func:`relay_command` spreads it into those options, in that order, where it stands (so every
command's help lists them alike), and hands the command a :class:`RelayAccess`, which reads the
configuration when first asked (flags › environment › file).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from nostr_buzz.cli.options import (
    DEFAULT_TIMEOUT,
    BunkerOption,
    ConfigOption,
    KeyOption,
    RelayOption,
    TimeoutOption,
)
from nostr_buzz.config import ConfigSources

if TYPE_CHECKING:
    from nostr_buzz.cli.signing import KeyChoice
    from nostr_buzz.keys import SecretKey


class RelayAccess:
    """What a command that talks to relays was given: ``--relay`` (the URLs, else the
    configuration's), ``--timeout``, ``--key``, ``--bunker`` and ``--config``.

    The configuration is read when first asked for (flags › environment › file), so that a
    command checks its own arguments first."""

    def __init__(
        self,
        relay: list[str] | None,
        timeout: float,
        key: str | None,
        config: Path | None,
        bunker: str | None = None,
    ) -> None:
        self.relay = tuple(relay or ())
        self.timeout = timeout
        self.key = key
        self.config = config
        self.bunker = bunker

    @cached_property
    def cfg(self) -> ConfigSources:
        return ConfigSources(config_path=self.config)

    def relays(self, direction: Literal["read", "write"]) -> tuple[str, ...]:
        """The relays to use; none configured is bad input."""
        return self.cfg.require_relays(self.relay, direction=direction)

    def relays_if_any(self, direction: Literal["read", "write"]) -> tuple[str, ...]:
        """The relays configured for ``direction``, perhaps none."""
        return self.cfg.relays(self.relay, direction=direction)

    def secret_key(self) -> SecretKey | None:
        """The configured secret key, if any (it answers NIP-42 challenges)."""
        return self.cfg.secret_key(self.key)

    def owner_key(self) -> SecretKey:
        """The configured secret key; none is bad input."""
        return self.cfg.require_secret_key(self.key)

    def key_choice(self) -> KeyChoice:
        """Who signs: the configured secret key or bunker; neither is bad input."""
        from nostr_buzz.cli.signing import require_key_choice

        return require_key_choice(self.cfg, self.key, self.bunker)


class _Spread:
    """Marks the parameter :func:`relay_command` spreads into the relay options."""

    def __init__(self, *, bunker: bool) -> None:
        self.bunker = bunker


#: ``--relay``, ``--timeout``, ``--key``, ``--config`` (a command that reads).
Relays = Annotated[RelayAccess, _Spread(bunker=False)]
#: ``--relay``, ``--timeout``, ``--key``, ``--bunker``, ``--config`` (a command that signs).
SigningRelays = Annotated[RelayAccess, _Spread(bunker=True)]

#: The spread options: (parameter, option, default), in the order of every command's help.
_SPREAD: Final = (
    ("relay", RelayOption, None),
    ("timeout", TimeoutOption, DEFAULT_TIMEOUT),
    ("key", KeyOption, None),
    ("bunker", BunkerOption, None),
    ("config", ConfigOption, None),
)


def relay_command(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with its :data:`Relays` or :data:`SigningRelays` parameter (keyword-only)
    spread into the relay options typer reads, and folded back into a :class:`RelayAccess`."""
    signature = inspect.signature(command, eval_str=True)
    parameters: list[inspect.Parameter] = []
    spread: str | None = None
    for parameter in signature.parameters.values():
        marks = [
            m for m in getattr(parameter.annotation, "__metadata__", ()) if isinstance(m, _Spread)
        ]
        if not marks:
            parameters.append(parameter)
            continue
        spread = parameter.name
        parameters += [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=alias
            )
            for name, alias, default in _SPREAD
            if name != "bunker" or marks[0].bunker
        ]
    if spread is None:
        raise TypeError(f"{command.__name__} has no Relays or SigningRelays parameter")
    folded: str = spread  # the command's own name for its RelayAccess

    @functools.wraps(command)
    def spread_command(**values: Any) -> None:
        given = {n: values.pop(n) for n, _, _ in _SPREAD if n in values}
        command(**values, **{folded: RelayAccess(**given)})

    spread_command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return spread_command
