"""A graph kernel's body: its op kernel calls, typed and emitted as one numba intrinsic.

The generated graph function is a single call, ``graph_body(i0, ..., h0, ...)``
(:mod:`numba_cache.codegen.sources`), its arguments grouped in tuples when there are
many. numba types and lowers that one call. Typing it types each op kernel call in
the graph's order, compiling or loading each op kernel for the types its arguments
have; lowering it emits the graph's constants, the calls
(:func:`.symbol_calls.emit_call`), the unpacking of multi-output results and the
reference counts numba's lowering of one Python statement per node gave:

- tensor and scalar constants are embedded here, typed and made as numba types and
  makes a global (an array is read-only; ``get_constant_generic``); other constants
  are arguments, globals of the graph function that numba types itself;
- the constants lifted out of fused kernels are read from their pack, an argument:
  typed as their embedded values would be (the op kernels' signatures are the
  same), a scalar loaded, a one-element tensor a read-only view into the pack
  without a reference of its own, as an embedded array has none (the pack outlives
  the call; counting references to it would make every op kernel's count of that
  argument an atomic operation: 3% of a call of the large benchmark model);
- the arguments (inputs, hidden constants, packs, other constants) and the lifted
  constants are borrowed;
- an op kernel's results are owned, and released after their last use unless returned
  (a list holding several outputs is unpacked by a small numba function, then released);
- each value returned carries a reference of its own.

The calls share the stack slots their callees write results into (see
:func:`.symbol_calls.emit_call`). A body of more than :data:`CALLS_PER_FUNCTION`
calls is emitted as that many LLVM functions called in turn, the values passing
between them through a frame on the caller's stack: LLVM holds a function's
machine code whole while it makes it, and the large benchmark model's graph
kernel (about 1,000 calls) in one function added 100 MiB to its compile's peak
memory (measured with parts of 50 to 500 calls: the peak lowest from 50 to 250; a
call as long as in one function, within the noise of 1-2%). A body
whose op kernels are linked in (``NBCACHE_LINK_OPS``, the linked build) is built for
its speed, mostly by a helper in the background: it is one function.

Before, numba typed and lowered one Python statement per node: on the large benchmark
model about 1,000 calls, 4,000 variables to type and 85,000 LLVM instructions to build,
print and parse. An error an op kernel raises returns from the graph function at once,
as numba's lowering of a call does (values alive then are not released, as in numba),
in less IR (:func:`numba_cache._compat.numba_internals.propagate_unless_ok`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

from numba_cache._compat import numba_internals
from numba_cache.codegen.module import compile_function
from numba_cache.codegen.sources import grouped
from numba_cache.kernels.assembly.symbol_calls import emit_call

#: The most op kernel calls emitted in one LLVM function (the body is split in parts).
CALLS_PER_FUNCTION = 100


def graph_body(arguments: list, embedded: dict, steps: list, returned: list, serve: Callable,
               lifted: dict | None = None, ahead=None, whole: bool = False):
    """A numba intrinsic taking `arguments` (names, as :func:`.sources.grouped` groups them),
    embedding the constants `embedded` maps names to (values), reading the constants
    `lifted` maps names to ``(pack name, position, value)`` from their packs (the value
    only types them), running `steps` (:class:`.sources.Step`) and returning the tuple
    of the values `returned` names.

    ``serve(kernel, signature)`` gives, for the global name of a step's kernel and
    the numba types of its arguments, the compile result to call and whether to
    call it by symbol (else its library is linked in, as numba links a dispatcher's).
    `ahead`, a :class:`.compile_ahead.CompileAhead`, is told of each step before it is
    served, and of the typing's end. A `whole` body is one LLVM function, however
    many its calls (:func:`_parts`).
    """
    from numba.core import types
    from numba.extending import intrinsic

    owned = {name for step in steps for name in step.outputs}
    structure = grouped(arguments)
    lifted = {} if lifted is None else lifted

    def typer(typingctx, *given):
        given_types = dict(_leaves(structure, given, lambda type_, position: type_[position]))
        value_types = types_before_steps(typingctx, given_types, embedded, lifted)
        calls = []
        try:
            for index, step in enumerate(steps):
                if ahead is not None:
                    ahead.before_step(index, value_types)
                signature = tuple(value_types[name] for name in step.inputs)
                compiled, by_symbol = serve(step.kernel, signature)
                result = compiled.signature.return_type
                unpacked = None
                if len(step.outputs) == 1:
                    results = [result]
                elif isinstance(result, types.BaseTuple) and len(result) == len(step.outputs):
                    results = list(result.types)
                else:  # a list, say: unpacked as numba unpacks it, checked at run time
                    unpacked = _unpacked(len(step.outputs), result)
                    results = list(unpacked.signature.return_type.types)
                value_types.update(zip(step.outputs, results, strict=True))
                calls.append((compiled, by_symbol, unpacked))
        finally:
            if ahead is not None:
                ahead.finish(value_types)
        return_type = (types.BaseTuple.from_types([value_types[name] for name in returned])
                       if returned else types.none)

        def codegen(context, builder, signature, given_values):
            values = {name: context.cast(builder, value, given_types[name], value_types[name])
                      for name, value in _leaves(structure, given_values, builder.extract_value)}
            emitter = _StepEmitter(context, value_types, steps, calls, returned, embedded, lifted)
            parts = [range(len(steps))] if whole else _parts(len(steps))
            # Split in parts, each part makes the constants it reads: here only those returned.
            made_here = embedded if len(parts) == 1 else returned
            values.update((name, context.get_constant_generic(builder, value_types[name], value))
                          for name, value in embedded.items() if name in made_here)
            if len(parts) == 1:  # else each part reads the lifted constants it needs
                values.update((name, emitter.lifted_value(builder, name, values[pack]))
                              for name, (pack, _, _) in lifted.items())
                emitter.emit(builder, parts[0], values, {})
            else:
                emitter.emit_in_functions(builder, parts, values)
            if not returned:
                return context.get_dummy_value()
            handed = set()
            for name in returned:
                if name in owned and name not in handed:
                    handed.add(name)
                elif context.enable_nrt:
                    context.nrt.incref(builder, value_types[name], values[name])
            return context.make_tuple(builder, return_type, [values[name] for name in returned])

        return return_type(*given), codegen

    # numba's intrinsics take a fixed number of arguments.
    names = ", ".join(f"a{position}" for position in range(len(structure)))
    source = (f"def body(typingctx{', ' if names else ''}{names}):\n"
              f"    return typer(typingctx{', ' if names else ''}{names})\n")
    return intrinsic(compile_function(source, "body", f"<numba_cache graph body {len(steps)}>",
                                      {"typer": typer}))


def _parts(count: int) -> list[range]:
    """The steps of each LLVM function the body is emitted in: one part up to
    :data:`CALLS_PER_FUNCTION` calls, else parts of nearly equal size."""
    number = max(1, -(-count // CALLS_PER_FUNCTION))
    bounds = [count * part // number for part in range(number + 1)]
    return [range(begin, end) for begin, end in itertools.pairwise(bounds)]


class _StepEmitter:
    """Emits the calls of a graph body's steps, and the reference counts around them.

    `calls` holds, per step, what the typer chose: the compile result, whether it
    is called by symbol, and the compile result unpacking its list of outputs if any;
    `embedded` maps the names of the constants the body embeds to their values,
    `lifted` those of the constants read from packs to ``(pack, position, value)``.
    """

    def __init__(self, context, value_types: dict, steps: list, calls: list, returned: list,
                 embedded: dict, lifted: dict):
        self.context, self.value_types, self.steps, self.calls = context, value_types, steps, calls
        # Ordered: the values returned are loaded in this order, the same in every process
        # (a set's order of strings is the process's hash seed's, and so would the code be).
        self.returned, self.embedded, self.lifted = dict.fromkeys(returned), embedded, lifted
        self.owned = {name for step in steps for name in step.outputs}
        self.last_use = {name: index for index, step in enumerate(steps) for name in step.inputs}
        self.views: dict = {}  # array type -> _one_element_view (llvmlite parses a module for it)

    def emit(self, builder, indices: range, values: dict, slots: dict,
             made: Callable | None = None) -> None:
        """Emit the steps `indices` with `builder`, reading and adding to `values`
        (names to LLVM values; a missing one is emitted where it is read); the calls
        share the stack slots in `slots`; ``made(builder, name, value)`` is called for
        each value a step makes, right after it."""
        context = self.context
        for index in indices:
            step, (compiled, by_symbol, unpacked) = self.steps[index], self.calls[index]
            # A block per call: numba names the blocks of a call's error check after
            # the block it is in, and the names would grow with every call (the IR
            # text of a large graph would be quadratic in its number of nodes).
            block = builder.append_basic_block(f"step{index}")
            builder.branch(block)
            builder.position_at_end(block)
            if not by_symbol:
                context.add_linking_libs([compiled.library])
            result = emit_call(context, builder, compiled,
                               [values[name] for name in step.inputs], slots)
            if unpacked is not None:
                context.add_linking_libs([unpacked.library])
                packed, result = result, emit_call(context, builder, unpacked, [result], slots)
                if context.enable_nrt:  # the unpacked values hold references of their own
                    _release(context, builder, compiled.signature.return_type, packed)
            if len(step.outputs) == 1:
                values[step.outputs[0]] = result
            else:
                values.update(zip(step.outputs, (builder.extract_value(result, position)
                                                 for position in range(len(step.outputs)))))
            if made is not None:
                for name in step.outputs:
                    made(builder, name, values[name])
            for name in dict.fromkeys([*step.inputs, *step.outputs]):
                if (name in self.owned and name not in self.returned
                        and self.last_use.get(name, -1) <= index and context.enable_nrt):
                    _release(context, builder, self.value_types[name], values[name])

    def lifted_value(self, builder, name: str, pack):
        """The lifted constant `name` read from `pack`, the LLVM value of its pack: a
        scalar, or a one-element tensor viewing the pack's element (no reference).

        The view is a constant array structure with the element's address put in:
        two instructions, where numba's array helpers would store and load each field."""
        from numba.core import cgutils, types

        context, value_type = self.context, self.value_types[name]
        pack_name, position, _ = self.lifted[name]
        pack_model = context.data_model_manager[self.value_types[pack_name]]
        data = builder.extract_value(pack, pack_model.get_field_position("data"))
        element = cgutils.gep_inbounds(builder, data, position)
        if not isinstance(value_type, types.Array):
            return builder.load(element)
        if value_type not in self.views:
            self.views[value_type] = _one_element_view(context, value_type)
        view, data_position, data_type = self.views[value_type]
        if element.type != data_type:
            element = builder.bitcast(element, data_type)
        return builder.insert_value(view, element, data_position)

    def emit_in_functions(self, builder, parts: list[range], values: dict) -> None:
        """Emit the steps as calls of one LLVM function per part, and add the values
        returned to `values`.

        The values a part reads from another, or the body returns, pass through a
        frame on the caller's stack, each value at an offset of its own (:meth:`_frame`),
        each part a function of a pointer to it, with numba's calling convention (an
        error propagates, as from a call). A part stores a value into the frame as soon
        as it is made, and reads one from it where it is used (:class:`_ReadWhereUsed`).
        An embedded constant is made where it is used: through the frame, its fields
        would be stored and loaded at every call (on the large benchmark model, 6% of
        a call's time); a lifted constant is read from its pack where it is used, the
        pack passing through the frame.
        Register allocation and stack slot colouring cost more than linearly in a
        function's size, and the machine code of one function is held whole: the
        large benchmark model's graph kernel (1,000 calls) in one function took about
        2 ms a call and most of its compile's peak memory.

        Each part is a module of its own, added to the library (parsed by LLVM) as
        soon as it is emitted, and the graph function declares it: llvmlite's objects
        for one part are alive at a time, not for all (on the large model they were
        about 100 MiB, the largest share of the compile's peak memory).
        """
        from llvmlite import ir
        from numba.core import cgutils, types

        context = self.context
        part_of = {index: number for number, part in enumerate(parts) for index in part}
        made_in = {name: part_of[index] for index, step in enumerate(self.steps)
                   for name in step.outputs}
        crossing = {self.lifted[name][0] if name in self.lifted else name
                    for index, step in enumerate(self.steps) for name in step.inputs
                    if made_in.get(name) != part_of[index] and name not in self.embedded}
        crossing |= {name for name in self.returned if name in made_in}
        offset_of, frame = self._frame(builder, sorted(crossing))

        def address(part_builder, pointer, name):
            value_type = context.get_value_type(self.value_types[name])
            slot = part_builder.gep(pointer, [ir.Constant(ir.IntType(32), offset_of[name])],
                                    inbounds=True)
            return part_builder.bitcast(slot, value_type.as_pointer())

        for name in offset_of:
            if name not in made_in:
                builder.store(values[name], address(builder, frame, name))
        slots: dict = {}
        library = context.active_code_library
        function_type = context.call_conv.get_function_type(types.none, [types.voidptr])
        for number, part in enumerate(parts):
            function_name = f"{builder.function.name}.part{number}"
            module = library.create_ir_module(function_name)
            function = ir.Function(module, function_type, name=function_name)
            function.attributes.add("noinline")
            context.call_conv.decorate_function(function, ["frame"], [types.voidptr])
            part_builder = ir.IRBuilder(function.append_basic_block("entry"))
            [pointer] = context.call_conv.get_arguments(function)
            pointer = part_builder.bitcast(pointer, frame.type)

            def read(name, part_builder=part_builder, pointer=pointer):
                if name in self.embedded:
                    return context.get_constant_generic(
                        part_builder, self.value_types[name], self.embedded[name])
                if name in self.lifted:
                    pack = self.lifted[name][0]
                    return self.lifted_value(part_builder, name, part_builder.load(
                        address(part_builder, pointer, pack)))
                return part_builder.load(address(part_builder, pointer, name))

            def made(step_builder, name, value, pointer=pointer):
                if name in offset_of:
                    step_builder.store(value, address(step_builder, pointer, name))

            self.emit(part_builder, part, _ReadWhereUsed(read), {}, made)
            context.call_conv.return_value(part_builder, context.get_dummy_value())
            library.add_ir_module(module)
            del module, function, part_builder, read, made
            block = builder.append_basic_block(f"part{number}")  # names its error's blocks
            builder.branch(block)
            builder.position_at_end(block)
            numba_internals.call_reusing_slots(
                context, builder,
                cgutils.get_or_insert_function(builder.module, function_type, function_name),
                types.none, [types.voidptr],
                [builder.bitcast(frame, cgutils.voidptr_t)], slots)
        values.update((name, builder.load(address(builder, frame, name)))
                      for name in self.returned if name in made_in)

    def _frame(self, builder, names: list) -> tuple[dict, object]:
        """The byte offsets of the values of `names` in a frame on the stack of
        `builder`'s function, and the frame (an ``i8*``).

        Its slots are not zero-filled, as numba's ``alloca_once`` does: each is written
        before it is read, and the large benchmark model's 1,200 values passing
        between parts took 8,000 stores a call to clear."""
        from llvmlite import ir

        context = self.context
        offset_of, end, alignment = {}, 0, 1
        layouts: dict = {}  # numba type -> (size, alignment): llvmlite parses a module for each
        for name in names:
            value_type = self.value_types[name]
            if value_type not in layouts:
                llvm_type = context.get_value_type(value_type)
                layouts[value_type] = (context.get_abi_sizeof(llvm_type),
                                       context.get_abi_alignment(llvm_type))
            size, value_alignment = layouts[value_type]
            end = -(-end // value_alignment) * value_alignment
            offset_of[name] = end
            end += size
            alignment = max(alignment, value_alignment)
        byte = ir.IntType(8)
        with builder.goto_entry_block():
            frame = builder.alloca(ir.ArrayType(byte, max(end, 1)), name="frame")
            frame.align = alignment
        return offset_of, builder.bitcast(frame, byte.as_pointer())


class _ReadWhereUsed(dict):
    """A part's values: those it makes, and the others (from the frame, embedded or
    lifted constants) read by ``read(name)`` at each use, where the builder is.

    Read once at the part's entry, hundreds of values would be live across all its
    calls, each spilled around every call: on the large benchmark model, whose node
    order (PyTensor's) scatters each value's uses over the parts, the graph
    kernel's machine code took 7.1 s where reads at each use take 1.5 s (same
    machine, same run), and a call 82-92 us where it takes 75-78 us with the frame
    of :meth:`_StepEmitter._frame` (NUMBA's: 76-80 us; one function: 75-79 us)."""

    def __init__(self, read: Callable):
        super().__init__()
        self._read = read

    def __missing__(self, name):
        return self._read(name)


def _release(context, builder, value_type, value) -> None:
    """Release the references `value` holds, as ``context.nrt.decref`` does, reading only
    the members that hold one: numba's reads every member (an array's shape and
    strides too) to find them, nine instructions a release, a tenth of a large graph
    kernel's IR."""
    manager = context.data_model_manager
    model = manager[value_type]
    if model.has_nrt_meminfo():
        context.nrt.decref(builder, value_type, value)
        return
    for member_type, member in model.traverse(builder):
        if manager[member_type].contains_nrt_meminfo():
            _release(context, builder, member_type, member(value))


def _one_element_view(context, array_type):
    """A one-element array of `array_type` with no data yet, as an LLVM constant (no
    meminfo, no parent, as :func:`numba.np.arrayobj.populate_array` makes a view), the
    position of its data field and that field's LLVM type."""
    from llvmlite import ir
    from numba.core import types

    model = context.data_model_manager[array_type]
    struct_type = model.get_value_type()
    intp = context.get_value_type(types.intp)
    itemsize = context.get_abi_sizeof(context.get_data_type(array_type.dtype))
    fields = [ir.Constant(element, None) for element in struct_type.elements]
    for field, value in (("nitems", ir.Constant(intp, 1)), ("itemsize", ir.Constant(intp, itemsize)),
                         ("shape", ir.Constant(ir.ArrayType(intp, array_type.ndim),
                                               [1] * array_type.ndim)),
                         ("strides", ir.Constant(ir.ArrayType(intp, array_type.ndim),
                                                 [itemsize] * array_type.ndim))):
        fields[model.get_field_position(field)] = value
    data_position = model.get_field_position("data")
    return ir.Constant(struct_type, fields), data_position, struct_type.elements[data_position]


def _leaves(entries: list, items, item_at: Callable):
    """``(name, item)`` for each name in `entries` (grouped names), its item found in
    `items` (one per entry) by ``item_at(group's item, position)`` for grouped names."""
    for entry, item in zip(entries, items, strict=True):
        if isinstance(entry, list):
            yield from _leaves(entry, [item_at(item, position) for position in range(len(entry))],
                               item_at)
        else:
            yield entry, item


@functools.cache
def _unpacker(count: int):
    """A numba function unpacking its argument into a tuple of `count` values, as the
    statement ``v0, v1, ... = value`` does (a length other than `count` raises)."""
    import numba

    names = ", ".join(f"v{position}" for position in range(count))
    source = f"def unpack(values):\n    {names} = values\n    return ({names},)\n"
    return numba.njit(compile_function(source, "unpack", f"<numba_cache unpack {count}>"))


def _unpacked(count: int, packed_type):
    """The compile result unpacking a `packed_type` value into `count` values."""
    unpacker = _unpacker(count)
    unpacker.compile((packed_type,))
    return unpacker.overloads[(packed_type,)]


def types_before_steps(typingctx, given_types: dict, embedded: dict, lifted: dict) -> dict:
    """The numba types of the values a body's steps read before any step has run: its
    arguments (`given_types`, by name), the constants it embeds (`embedded`, name to
    value) and those it reads from packs (`lifted`, as :func:`graph_body` takes them)."""
    from numba.core import types

    value_types = {name: types.unliteral(type_) for name, type_ in given_types.items()}
    value_types.update((name, _global_type(typingctx, value)) for name, value in embedded.items())
    value_types.update((name, _global_type(typingctx, value))
                       for name, (_, _, value) in lifted.items())
    return value_types


def types_of_arguments(signature: tuple, arguments: list, namespace: dict, embedded: dict,
                       lifted: dict) -> dict:
    """:func:`types_before_steps` of a body called with `arguments` (names) by a graph
    function of `signature`: its parameters are the first arguments, the others the
    function's globals in `namespace`, typed as numba types a global."""
    from numba.core.registry import cpu_target

    typingctx = cpu_target.typing_context
    passed = [*signature, *(_global_type(typingctx, namespace[name])
                            for name in arguments[len(signature):])]
    return types_before_steps(typingctx, dict(zip(arguments, passed, strict=True)), embedded,
                              lifted)


def _global_type(typingctx, value):
    """The type numba gives `value` as a global of nopython code, literals made plain:
    an array is read-only (``TypeInferer.typeof_global``)."""
    from numba.core import types

    type_ = typingctx.resolve_value_type(value)
    if isinstance(type_, types.Array):
        return type_.copy(readonly=True)
    return types.unliteral(type_)
