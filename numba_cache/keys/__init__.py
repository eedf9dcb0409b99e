"""Cache keys: stable sha256 keys per op kernel and per graph, with their components.

- :mod:`.fingerprint`: the environment every key is salted with (:mod:`.remembered`: the same,
  read cheaply, for commands that do not compile);
- :mod:`.key`: a digest that keeps its components;
- :mod:`.canonical`: content descriptions of values (props, constants, types);
- :mod:`.graph`: descriptions of ops, types and whole graphs;
- :mod:`.kernels`: the keys of cache levels 2 and 3 (graph kernel, op kernel).
"""

from numba_cache.keys.fingerprint import Fingerprint, current_fingerprint

__all__ = ["Fingerprint", "current_fingerprint"]
