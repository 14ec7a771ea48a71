"""The `kiln` logger and KILN_LOG.

Every module logs under `kiln` (`kiln.backend`, `kiln.connection`,
`kiln.rpc`, ...), so applications configure the client with
logging.getLogger("kiln"). KILN_LOG=debug|info|warning|error sets that
logger's level on import and, if neither it nor the root logger has a
handler, gives it one on stderr: the variable alone is enough to see what
kiln does. At debug, every RPC (kiln.rpc) and every call-channel call
(kiln.channel) is logged with its latency.
"""
from __future__ import annotations

import logging
import os
import sys

LOGGER_NAME = "kiln"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "warn": logging.WARNING, "error": logging.ERROR}
FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"


def configure_from_env(value: str | None = None) -> int | None:
    """Applies KILN_LOG (or `value`) to the kiln logger; returns the level
    set, or None when the variable is unset or empty.

    An unknown value is reported once on stderr and otherwise ignored: a
    typo in a logging variable must not stop a model from compiling.
    """
    if value is None:
        value = os.environ.get("KILN_LOG", "")
    value = value.strip().lower()
    if not value:
        return None
    level = LEVELS.get(value)
    if level is None:
        print(f"kiln: KILN_LOG={value!r} ignored; valid values: "
              f"{', '.join(k for k in LEVELS if k != 'warn')}", file=sys.stderr)
        return None
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(level)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
    return level
