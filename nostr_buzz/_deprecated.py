"""Renamed public names keep working, with a :class:`DeprecationWarning`, for one minor version
(CHANGELOG.md, "Deprecated"): the old name maps to the new, and giving both is a ``TypeError``."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["renamed_keywords"]

_F = TypeVar("_F", bound=Callable[..., Any])


def renamed_keywords(renamed: Mapping[str, str], *, removed_in: str) -> Callable[[_F], _F]:
    """A decorator: each keyword ``old`` of ``renamed`` is passed on as its new name, with a
    warning that names both and the version that removes the old one."""

    def decorate(function: _F) -> _F:
        where = function.__qualname__

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renamed.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise TypeError(f"{where}() got {old}= and {new}=: give {new}= only")
                warnings.warn(
                    f"{where}({old}=…) is deprecated and will be removed in nostr-buzz "
                    f"{removed_in}: use {new}=",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
