import sys

from numba_cache.cli import main

sys.exit(main())
