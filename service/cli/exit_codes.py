"""The exit statuses every ``bandit`` command uses (shown in ``bandit --help``)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

EPILOG = """\
exit status (every command):
  0  success
  1  failure: a valid command could not finish (a store or database unreachable,
     an estimate refused because the log does not support the target, an unexpected error)
  2  usage: invalid options or arguments, including a file, database or policy they name
     that does not exist, or a setting the command needs that is not set (argparse's
     own errors are 2 too)"""
