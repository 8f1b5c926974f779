"""Messages that name settings by field, so each reader sees its own words.

The library knows its settings by their fields (``chunk_size``, ``precision="int8"``); the
command line knows them by flags (``--chunk-size``, ``--precision int8``). A message that tells
the user which setting to change is written once, as a template whose ``{name}`` marks stand
for :class:`Setting` values::

    raise FieldError("a word LM ({lm}) needs the prefix beam ({beam})",
                     lm=Setting("lm"), beam=Setting("mode", "prefix_beam"))

``str()`` of it reads ``a word LM (lm) needs the prefix beam (mode="prefix_beam")``; the CLI
renders the same message with the flags it declared (``cli/flags.py``). Warnings use a
:class:`Says` as the log message: the CLI's log handler renders it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Type, TypeVar

__all__ = [
    "FieldError", "Says", "Setting", "Words", "python_words", "literal", "raised", "rendered",
    "says_of",
]  # fmt: skip

_UNSET: Any = object()


@dataclass(frozen=True)
class Setting:
    """A field, and optionally the value a message asks for (or complains of)."""

    name: str
    value: Any = _UNSET

    @property
    def has_value(self) -> bool:
        return self.value is not _UNSET


Words = Callable[[Setting], str]
"""how a reader names a setting"""


def python_words(s: Setting) -> str:
    """A setting as a Python caller writes it: ``chunk_size``, ``engine="onnxruntime"``."""
    if not s.has_value:
        return s.name
    value = f'"{s.value}"' if isinstance(s.value, str) else f"{s.value}"
    return f"{s.name}={value}"


class Says:
    """A message whose ``{name}`` marks are settings, rendered in a reader's words."""

    def __init__(self, template: str, **settings: Setting) -> None:
        self.template, self.settings = template, settings
        self.render(python_words)  # a mark without its setting fails here, where it is written

    def render(self, words: Words = python_words) -> str:
        return self.template.format(**{k: words(s) for k, s in self.settings.items()})

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        return f"Says({self.render()!r})"


class FieldError(ValueError):
    """A ValueError whose message names settings (:class:`Says`): ``str()`` in Python's
    words, :meth:`render` in another reader's."""

    def __init__(self, template: str, **settings: Setting) -> None:
        self.says = Says(template, **settings)
        super().__init__(self.says.render())

    def render(self, words: Words) -> str:
        return self.says.render(words)


E = TypeVar("E", bound=BaseException)


def raised(kind: Type[E], template: str, **settings: Setting) -> E:
    """An exception of ``kind`` (one that takes a message, e.g. FileNotFoundError) whose
    message names settings; it carries the :class:`Says` as ``says`` like a FieldError."""
    says = Says(template, **settings)
    error = kind(says.render())
    error.says = says  # type: ignore[attr-defined]
    return error


def literal(text: object) -> str:
    """``text`` (a path, a value) as it must stand in a template: its braces doubled."""
    return str(text).replace("{", "{{").replace("}", "}}")


def says_of(error: BaseException) -> Optional[Says]:
    """The settings-naming message an exception carries, if any."""
    found = getattr(error, "says", None)
    return found if isinstance(found, Says) else None


def rendered(error: BaseException, words: Words) -> str:
    """An exception's message in ``words`` (its plain message when it names no settings)."""
    says = says_of(error)
    return says.render(words) if says is not None else str(error)
