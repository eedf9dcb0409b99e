"""``startup``: the hook that lets ``NBCACHE_ACTIVATE=1`` reach every process of an environment."""

from __future__ import annotations

import json
from pathlib import Path

from numba_cache.integration import startup

ACTIONS = {
    "install": "write the startup hook into this environment's site-packages",
    "remove": "delete the startup hook",
    "status": "say whether the hook is installed and whether NBCACHE_ACTIVATE asks for activation",
}


def register(commands, common) -> None:
    description = ("with the hook installed, every Python process of this environment that "
                   "imports PyTensor compiles through numba_cache when NBCACHE_ACTIVATE=1")
    sub = commands.add_parser("startup", parents=[common], help="the NBCACHE_ACTIVATE startup hook",
                              description=description)
    sub.add_argument("action", choices=list(ACTIONS), nargs="?", default="status",
                     help="; ".join(f"{name}: {text}" for name, text in ACTIONS.items()))
    sub.add_argument("--site-packages", type=Path, default=None, metavar="DIR",
                     help="the directory of .pth files to use (default: this environment's)")
    sub.set_defaults(handler=command_startup)


def command_startup(args) -> int:
    directory = args.site_packages or startup.site_packages()
    if not directory.is_dir():
        from numba_cache.cli.access import CliError

        raise CliError(f"{directory} is not a directory; name an existing site-packages")
    if args.action == "install":
        path = startup.install(directory)
    elif args.action == "remove":
        path = startup.remove(directory)
    else:
        path = startup.installed(directory)
    installed = args.action != "remove" and path is not None
    wanted = startup.activation_wanted()
    if args.json:
        print(json.dumps({"action": args.action, "hook": str(directory / startup.PTH_NAME),
                          "installed": installed, "activate": wanted}))
        return 0
    if args.action == "remove":
        print(f"removed {path}" if path else f"no hook in {directory}")
        return 0
    if not installed:
        print(f"no hook in {directory}: only processes that import numba_cache activate it "
              "(numba-cache startup install)")
        return 0
    setting = "set" if wanted else "not set: set NBCACHE_ACTIVATE=1 to activate"
    print(f"{'installed' if args.action == 'install' else 'hook'} {path}: processes of this "
          f"environment that import PyTensor activate numba_cache when NBCACHE_ACTIVATE=1 "
          f"(in this shell: {setting})")
    return 0
