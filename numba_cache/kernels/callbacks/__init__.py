"""Entry points and C callbacks: kernels other machine code calls by symbol.

- :mod:`.entry_point`: a graph kernel as other numba code calls it, by symbol;
- :mod:`.cfunc`: ``numba.cfunc`` callbacks around entry points, stored like kernels;
- :mod:`.links`: the symbols such code needs its process to define;
- :mod:`.hidden_symbols`: hidden constant arrays as symbols machine code can name.
"""
