"""``numba-cache``: the command line of numba_cache (also ``python -m numba_cache``).

One module per group of commands: :mod:`.info` (``dir``, ``stats``,
``fingerprint``), :mod:`.entries` (``list``, ``show``), :mod:`.maintenance`
(``clear``, ``prune``, ``verify``), :mod:`.explain` (``explain``) and
:mod:`.portable` (``warm``, ``export``, ``import``); :mod:`.remote` adds
``--remote`` (the shared tier: Redis or a bucket) to ``stats``, ``list``, ``clear`` and
``prune``; :mod:`.startup` (``startup``) installs the hook that activates numba_cache in
every process; ``demo`` runs :mod:`numba_cache.evaluation.demo`. All of them work
through the store's public API. Every command but ``demo`` takes ``--json`` (field names
in docs/cli.md) and ``-v``/``--verbose`` (``-vv``: debug, every lookup with its key
components).

Exit status: 0 done; 1 done, with something to report (``verify`` found
problems or a key collision, ``clear`` deleted less than asked or was declined, the
target of ``explain`` or ``verify --recompile`` failed); 2 not done: bad input, an unknown or ambiguous key, no
store, no permission. Then stderr holds one line, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from numba_cache import logs
from numba_cache import settings as settings_module
from numba_cache.cli import entries, explain, info, maintenance, portable, remote, startup
from numba_cache.cli.access import CliError


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, like every other error here."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    root = _Parser(prog="numba-cache", description="Inspect and manage numba_cache's store.")
    root.add_argument("-v", "--verbose", action="count", default=0,
                      help="log what numba_cache does (-vv: every lookup)")
    common = _Parser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="log what numba_cache does (-vv: every lookup)")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (info, entries, maintenance, explain, portable, remote, startup):
        group.register(commands, common)
    demo = commands.add_parser("demo", help="compile a real model twice, cached and uncached")
    demo.add_argument("demo_args", nargs=argparse.REMAINDER)
    demo.set_defaults(handler=_demo)
    return root


def main(argv=None) -> int:
    warnings.showwarning = _one_line_warning
    args = parser().parse_args(argv)
    if args.verbose:
        logs.set_level("debug" if args.verbose > 1 else "info")
    try:
        return args.handler(args)
    except (CliError, settings_module.SettingsError) as error:
        print(f"numba-cache: {error}", file=sys.stderr)
    except BrokenPipeError:
        # The reader (head, less) has gone: not an error, and nothing more to print.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as error:
        print(f"numba-cache: {error}", file=sys.stderr)
    except KeyboardInterrupt:
        print("numba-cache: interrupted", file=sys.stderr)
        return 130
    return 2


def _demo(args) -> int:
    from numba_cache.evaluation import demo

    return demo.main(args.demo_args)


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"numba-cache: warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
