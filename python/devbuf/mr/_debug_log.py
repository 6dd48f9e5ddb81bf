"""RMM's debug-log switches (``rmm.set_logging_level`` and kin) on devbuf's debug log: lines
about what the memory resources do, written to the file ``$DEVBUF_DEBUG_LOG_FILE`` names (made
anew at the first line) or to stderr. What devbuf logs at each level:

- ``trace``: every allocation and free through an adaptor (pool, binning, limiting, statistics...);
- ``debug``: a pool taking a block from upstream, and giving one back; a device's current
  resource for a kind being set or reset;
- ``info``, ``warn`` and ``critical``: nothing (devbuf has no such events);
- ``error``: a pool refusing a request its maximum size leaves no room for.

The level starts at ``off`` (RMM's starts at ``info``): devbuf writes nothing unless asked, and
every refusal is raised to the caller anyway. Lines at the flush level (default ``warn``) or above
are written out at once; the others when :func:`flush_logger` runs, a later line reaches the flush
level, or the interpreter exits.
"""

import atexit
import enum

from .. import _devbuf


class level_enum(enum.IntEnum):
    """A debug-log level, RMM's (and spdlog's) numbering; ``off`` as the log's level keeps no line."""

    trace = 0
    debug = 1
    info = 2
    warn = 3
    error = 4
    critical = 5
    off = 6


def _index(level: level_enum, argument: str = "level") -> int:
    if not isinstance(level, level_enum):
        raise TypeError(f"{argument}: expected a devbuf.mr.level_enum, got {level!r}")
    return int(level)


def set_logging_level(level: level_enum) -> None:
    """Keeps lines of ``level`` and above from now on."""
    _devbuf._set_debug_log_level(_index(level))


def get_logging_level() -> level_enum:
    """The least severe level kept."""
    return level_enum(_devbuf._debug_log_level())


def should_log(level: level_enum) -> bool:
    """Whether a line of ``level`` would be kept."""
    return bool(_devbuf._debug_log_should_log(_index(level)))


def set_flush_level(level: level_enum) -> None:
    """Writes out lines of ``level`` and above at once from now on."""
    _devbuf._set_debug_log_flush_level(_index(level))


def get_flush_level() -> level_enum:
    """The least severe level written out at once."""
    return level_enum(_devbuf._debug_log_flush_level())


def flush_logger() -> None:
    """Writes out the lines waiting in the log's buffer."""
    _devbuf._flush_debug_log()


atexit.register(flush_logger)
