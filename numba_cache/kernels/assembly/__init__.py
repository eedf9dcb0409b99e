"""Graph kernels assembled from op kernels.

- :mod:`.graph_kernel`: the graph kernel, level 2 of the cache (:doc:`how-it-works`);
- :mod:`.conversion`: PyTensor ops converted to op kernels, on a miss only;
- :mod:`.op_function`: the function an op kernel compiles, PyTensor's implementation
  itself where it can be;
- :mod:`.generated_files`: PyTensor's generated source files, a damaged one written again;
- :mod:`.length_generic`: conversions of ours for ops whose PyTensor conversion bakes
  a length in (``AllocDiag``), one op kernel for every length;
- :mod:`.remembered_op_keys`: a graph of other static lengths served without converting;
- :mod:`.graph_body`: a graph kernel's body, its op kernel calls emitted as one
  intrinsic, with the types :mod:`.predicted_types` predicts;
- :mod:`.symbol_calls`: calls from one numba function to another's code by symbol;
- :mod:`.op_links`: the op kernels a graph kernel calls, recorded and loaded first;
- :mod:`.glue`: the short LLVM pipeline of graph kernels that only call op kernels.
"""
