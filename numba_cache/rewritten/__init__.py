"""Level 1 of the cache: the rewritten graph, keyed by the graph before rewriting.

- :mod:`.rewrite_cache`: a function maker that looks the rewritten graph up before
  PyTensor rewrites it, and stores it after;
- :mod:`.data_reads`: what rewriting read of constants' data, so that a key names it;
- :mod:`.data_readers`: the kinds of read a key can answer, by registration;
- :mod:`.rewrite_failures`: whether one of PyTensor's rewrites failed, so that the
  graph is not stored;
- :mod:`.cycle_check`: PyTensor's inplace cycle checks answered from what the graph
  gained since the last one, so that a miss rewrites faster (the same graph).
"""
