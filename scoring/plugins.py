"""Plugins chosen by name in the policy — node signals, descheduler strategies — each with its
arguments decoded and checked by its own `Args` dataclass. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from scoring.policy import PluginChoice, PolicyError, decode_fields

T = TypeVar("T")


class PluginArgs(Protocol):
    def validate(self) -> list[str]:
        """What is wrong with the arguments, each naming its camelCase key; empty when nothing is."""
        ...


@dataclass(frozen=True)
class Registration(Generic[T]):
    """How a plugin is named in a policy, what arguments it takes and how it is built from them."""

    name: str
    args: type
    """A frozen dataclass of its arguments, each with its default (`PluginArgs`)."""
    build: Callable[[Any], T]


@dataclass(frozen=True)
class NoArgs:
    """A plugin that takes no arguments."""

    def validate(self) -> list[str]:
        return []


def build_all(choices: Sequence[PluginChoice], registered: Mapping[str, Registration[T]], where: str,
              kind: str) -> tuple[T, ...]:
    """The chosen plugins, in order, each built from its arguments; none chosen: every registered
    one with its defaults, in the registry's order. PolicyError naming the
    entry (`where[i].name`, `where[i].args.key`) for an unknown name or an argument that does not fit."""
    if not choices:
        return tuple(registration.build(registration.args()) for registration in registered.values())
    built = []
    for i, choice in enumerate(choices):
        entry = f"{where}[{i}]"
        registration = registered.get(choice.name)
        if registration is None:
            raise PolicyError(f"{entry}.name: unknown {kind} {choice.name!r} (known: {', '.join(registered)})")
        args = decode_fields(registration.args, choice.args, f"{entry}.args")
        if problems := args.validate():
            raise PolicyError(f"{entry}.args.{problems[0]}")
        built.append(registration.build(args))
    return tuple(built)
