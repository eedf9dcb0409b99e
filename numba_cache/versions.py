"""Format versions, all in one place. Bump one when the form it names changes.

Each is written into what it versions and checked when read: an entry, archive,
index or envelope of another version is a miss, a refusal or a rebuild, never
misread.
"""

#: numba_cache's key and entry formats, part of every fingerprint: bumping it
#: invalidates every entry.
#: 4: kernels are self-contained (``kernels/protocol/self_contained.py``): format 3 entries
#: hold weak copies that a process binds to whatever it loaded first; op keys
#: describe tensor subclasses in full (CSR and CSC kernels shared a key).
KEY_FORMAT = 4

#: The shape of generated code, part of every kernel key.
#: 3: nodes in :func:`numba_cache.keys.order.execution_order`, not ``fgraph.toposort()``
#: (version 2 kernels compiled from a graph restored by the rewrite cache could
#: run an inplace op before a reader of its input).
#: 4: graph entries carry the warnings of their conversion (replayed on a hit), which
#: version 3 entries lack.
#: 5: graph kernels call their op kernels by symbol (``kernels/assembly/symbol_calls.py``) and
#: list them (``kernels/assembly/op_links.py``); version 4 graph kernels linked them in.
#: 6: graph kernels that only call are optimised by a short pipeline (``kernels/assembly/glue.py``).
#: 7: an op kernel whose implementation is a plain ``numba.njit`` function of its inputs
#: compiles that function itself, not a wrapper calling it (``kernels/assembly/op_function.py``).
CODEGEN = 7

#: The body of graph kernels, part of graph kernel keys only: op kernels are unchanged.
#: 1: the op kernel calls are emitted by one intrinsic (``kernels/assembly/graph_body.py``);
#: before, numba typed and lowered one generated Python statement per node.
#: 2: a body of many calls is split into functions (``CALLS_PER_FUNCTION``); fused
#: kernels take their additive and multiplicative constants as arguments
#: (``codegen/lifted_constants.py``).
#: 3: the lifted constants are read from packs passed as arguments, and the key
#: describes them by type and position: version 2 bodies embed their values.
#: 4: the one-element constants nodes read are passed in packs too
#: (``codegen/sources.py``), graph kernels are indexed by their code too
#: (``keys/kernels.py``: ``graph_code_key``), their IR digested without their name.
#: 5: a lifted one-element tensor is a constant view with its address put in, and a body
#: split in parts makes its embedded constants in the parts only (less IR to build).
#: 6: a failed call's error propagates in 3 instructions and one block
#: (``_compat/numba_internals.py``: ``propagate_unless_ok``), not numba's 9 and 4.
GRAPH_BODY = 6

#: The stored form of an object-mode block, part of its key.
#: 1: its environment is rebuilt by ``kernels/runtime/detached.py`` (from the names its
#: kernel's entry carries, while PyTensor's dispatch is not imported); unversioned
#: entries name numba's ``_rebuild_env``, and a numba_cache without that module cannot
#: load the new ones.
OBJMODE_BLOCK = 1

#: The body of graph kernels with their op kernels linked in (``NBCACHE_LINK_OPS``, the
#: linked build), part of their keys only, beside :data:`GRAPH_BODY`.
#: 1: the body is one LLVM function whatever its number of calls: split in parts, a
#: call of the large benchmark model took about 4% longer.
LINKED_BODY = 1

#: The stored form of a rewritten graph, or what rewriting produces; part of every rewrite key.
#: 2: the linker is a ``NumbaLinker`` subclass, so Scan inner graphs are baked with
#: numba's inner-graph rewrite (version 1 entries hold C/VM-baked Scan inner graphs).
#: 3: graphs with data constants are keyed by the questions rewriting asked of
#: the data (``rewritten/data_reads.py``); their stored graphs refer to data by slot.
#: 4: entries hold the digest of the kernel source of the rewritten graph, which
#: a restored graph must reproduce (version 3 restores lacked the destroy orderings).
#: 5: the graph kernel key is stored as JSON, which ``verify`` checks without unpickling.
#: 6: the kernel source of a graph calls fused kernels with their constants lifted
#: (``codegen/lifted_constants.py``): version 5 digests no longer match.
#: 7: the kernel source passes lifted constants in packs, and graph kernel keys
#: describe them by type (version 6 entries hold the keys by value).
#: 8: the kernel source passes one-element node inputs in packs (graph body 4):
#: version 7 entries hold the digests of sources that embed them.
#: 9: graphs are described with the tags PyTensor's rewrites read (``keys/graph.py``:
#: ``REWRITE_TAGS``): a version 8 entry of a graph rewritten with ``A.tag.symmetric``
#: has the key of the same graph without it.
#: 10: the rewritten graph is stored with its node order, PyTensor's ``toposort`` of it
#: (``keys/order.py``), and restored in that order; a data-bound graph's key by content
#: is its data key with the data's digests.
REWRITE_CACHE = 10

#: The on-disk record of one entry (``store/record.py``), in its magic ``NBCACHE<n>``;
#: version 2 records (every blob raw) are still read.
RECORD = 3

#: The SQLite index of a local store (``PRAGMA user_version``). 2: the store's total
#: size kept by triggers; an index of schema 1 is upgraded in place (read as it is when
#: read-only); any other is not used (the entries' files are listed instead).
INDEX_SCHEMA = 2

#: ``numba-cache export`` archives; another is refused with what to do.
ARCHIVE = 1

#: The signed envelope of an entry on the Redis tier, in its magic ``NBREMOT<n>``.
REMOTE_ENVELOPE = 1
