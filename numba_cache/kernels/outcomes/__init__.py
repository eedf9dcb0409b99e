"""What a lookup concluded, and how it is told.

- :mod:`.uncacheable`: which kernels are never stored, and why;
- :mod:`.collisions`: hits recompiled and compared with what the store served;
- :mod:`.replay`: a conversion's warnings, told again on a hit;
- :mod:`.replaced_numba`: stepping aside when test doubles replace numba's compiler;
- :mod:`.report`: counters, the log and observers of each lookup.
"""
