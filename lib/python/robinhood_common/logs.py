"""Log levels as every component spells them: ``--log-level debug|info|warn|error``, the
Go components' words (``warning`` is accepted too, as Python's own name for warn)."""
from __future__ import annotations

import argparse
import logging

#: The levels, in the Go components' spelling.
LEVELS = ("debug", "info", "warn", "error")
_ALIASES = {"warning": "warn"}


def parse_level(text: str) -> int:
    """The logging level of ``text`` (any case); ValueError naming the known ones."""
    word = _ALIASES.get(text.lower(), text.lower())
    if word not in LEVELS:
        raise ValueError(f"{text!r} is not one of {', '.join(LEVELS)}")
    return {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}[word]


def level_arg(text: str) -> int:
    """``type=`` of an argparse ``--log-level`` option."""
    try:
        return parse_level(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
