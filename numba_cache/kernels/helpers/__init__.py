"""Helper processes that compile in the background for the process they help.

- :mod:`.compile_ahead`: op kernels compiled ahead while a graph is typed, by a forked
  helper or a new interpreter (:mod:`.spawned_helper`);
- :mod:`.linked_build`: graph kernels rebuilt with their op kernels linked in, by a
  helper in the background (:mod:`.linking_helper`).

Helpers that are new interpreters start one way, :mod:`.interpreter`'s.
"""
