"""Moving a store's work elsewhere: compiled ahead of time, or shipped as a file.

- :mod:`.warm` (parent) and :mod:`.warm_target` (one child process per target):
  ``numba-cache warm``;
- :mod:`.archive`: ``numba-cache export``/``import``, a store's entries in one archive.
"""
