"""Errors raised on bad input. Each message names the file, line or field at fault."""

from __future__ import annotations


class UedpError(Exception):
    """Base class of every error the library raises for bad input or configuration.

    The command-line tools print these as one line and exit with status 2.
    """


class CorpusError(UedpError, ValueError):
    """A corpus could not be loaded: missing file, malformed line, bad encoding, empty corpus..."""


class ConfigError(UedpError, ValueError):
    """An option has a bad value (the message names the option)."""


class SummaryError(UedpError, ValueError):
    """A run's summary.json is missing or malformed (the message names the file; see uedp.summary)."""
