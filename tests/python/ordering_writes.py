"""The ordering machine's rules for devbuf's own writes (ordering_machine.py): fills (byte, typed,
strided), element assignment, copies from the host and from other memory, and a buffer's size
changing (`resize`, `reserve`) while consumers may still be writing it; every write is modelled
as NumPy does the same on the model's bytes."""

import collections
import contextlib

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import rule

import devbuf
from ordering_model import MEMORIES, SOME_STREAM, VALUES, Base, Block, flat, host_pattern, step

# What the resize rule's draws did (printed with the run's counts: a rule refused everywhere
# would test nothing).
RESIZES = collections.Counter()


def rows(obj):
    """`obj`'s first elements (at most 1024) as 16 rows (a view), or None where they do not split
    evenly. At most 64 columns: devbuf writes a strided view run by run, a command a run, and a
    write of every other element of megabytes would be most of a sequence's time."""
    elements = flat(obj)
    count = min(elements.size, 1024)
    return elements[:count].reshape(16, -1) if count % 16 == 0 else None


def current(stream):
    """`with stream:` where there is one; nothing otherwise."""
    return stream if stream is not None else contextlib.nullcontext()


class WriteRules(Base):
    @rule(memory=MEMORIES, value=VALUES,
          how=st.sampled_from(["fill", "copy_from", "with stream", "typed fill", "strided fill", "setitem",
                               "setitem broadcast", "setitem list", "copy_from_host"]),
          stream=SOME_STREAM, blocking=st.booleans())
    @step
    def devbuf_writes(self, memory, value, how, stream, blocking):
        """devbuf writes the memory: a fill (of bytes, of elements in the array's dtype or another
        one, of a strided view run by run), an assignment of elements (a scalar, a host array
        broadcast, a list), a copy from the host; on a stream (`stream=` or `with stream:`) or the
        memory's own queue, waited for or not where the call lets it be."""
        obj = memory.obj
        on = self.stream_on(obj.device, stream)
        pending = None if blocking else (on or obj.queue)
        table = rows(obj)
        if how == "with stream" and on is not None:
            with on:
                if isinstance(obj, devbuf.Buffer):
                    obj.fill(value, blocking=blocking)
                else:
                    obj.copy_from(host_pattern(obj, value), blocking=blocking)
            memory.wrote(value, pending)
        elif how == "typed fill" and (obj.itemsize != 1 or obj.shape[-1] % 2 == 0):
            # Array.fill in a dtype of another size than the memory's (Array.view(dtype); a
            # Buffer's bytes as an Array first): the model's elements, as NumPy fills them.
            typed = (obj[...] if isinstance(obj, devbuf.Buffer) else obj).view("uint16" if obj.itemsize != 2 else "uint8")
            typed.fill(value, stream=on, blocking=blocking)
            memory.elements(typed).fill(value)
            memory.writer = pending
        elif how == "strided fill" and table is not None:
            table[1::3].fill(value, stream=on, blocking=blocking)
            memory.elements(table)[1::3] = value
            memory.writer = pending
        elif how in ("setitem", "setitem broadcast", "setitem list") and table is not None:
            # `x[key] = value` has no stream or blocking argument: it runs on the stream of an
            # enclosing `with stream:` block, waited for.
            model = memory.elements(table)
            if how == "setitem":
                key, assigned = (slice(None, None, 5), slice(1, None, 2)), value
            elif how == "setitem broadcast":
                key = slice(2, None, 4)
                assigned = np.arange(table.shape[1], dtype=obj.dtype) % 7 + value
            else:
                key, assigned = (slice(0, 4), slice(0, 2)), [[value, 255 - value]] * 4
            with current(on):
                table[key] = assigned
            model[key] = assigned
            memory.writer = None
        elif how == "copy_from_host" and isinstance(obj, devbuf.Buffer):
            # Into the buffer's first bytes (RMM's copy_from_host), waited for.
            data = bytearray(host_pattern(obj, value).tobytes()[:max(1, obj.nbytes // 2)])
            obj.copy_from_host(data, stream=on)
            memory.region(obj)[:len(data)] = value
            memory.writer = None
        elif how == "fill" and isinstance(obj, devbuf.Buffer):
            obj.fill(value, stream=on, blocking=blocking)
            memory.wrote(value, pending)
        else:
            obj.copy_from(host_pattern(obj, value), stream=on, blocking=blocking)
            memory.wrote(value, pending)

    @rule(target_memory=MEMORIES, source=MEMORIES, stream=SOME_STREAM, blocking=st.booleans(),
          how=st.sampled_from(["copy_from", "setitem", "copy_from_device"]))
    @step
    def devbuf_copies(self, target_memory, source, stream, blocking, how):
        """devbuf copies one memory into another (between the CUDA test driver's devices where
        they differ): `copy_from`, an assignment `x[...] = y`, or into a buffer's first bytes
        (RMM's copy_from_device)."""
        target, origin = target_memory.obj, source.obj
        if target_memory.block is source.block:
            return
        on = self.stream_on(target.device, stream)
        if how == "copy_from_device":
            into = target if isinstance(target, devbuf.Buffer) else target.buffer
            if origin.nbytes > into.nbytes:
                return
            into.copy_from_device(origin, stream=on)
            target_memory.region(into)[:origin.nbytes] = source.expected
            target_memory.writer = None
            return
        if how == "setitem" and target.dtype == origin.dtype and target.size >= origin.size:
            with current(on):
                flat(target)[:origin.size] = flat(origin)
            target_memory.expected[:origin.nbytes] = source.expected
            target_memory.writer = None
            return
        if target.nbytes != origin.nbytes:
            return
        if not isinstance(target, devbuf.Buffer) and (target.shape, target.dtype) != (origin.shape, origin.dtype):
            return
        target.copy_from(origin, stream=on, blocking=blocking)
        target_memory.expected[:] = source.expected
        target_memory.writer = None if blocking else (on or target.queue)

    # -- a buffer's size -------------------------------------------------------------------------------

    @rule(memory=MEMORIES, how=st.sampled_from(["resize", "reserve"]),
          scale=st.sampled_from([0.25, 0.5, 0.75, 1.25, 1.5, 2]), stream=SOME_STREAM, value=VALUES,
          blocking=st.booleans(), read=st.booleans(), reuse=st.booleans())
    @step
    def resize(self, memory, how, scale, stream, value, blocking, read, reuse):
        """RMM's DeviceBuffer.resize/reserve on a buffer whose memory a consumer may still be
        writing: within its capacity in place, else into new memory from where it came, the bytes
        kept copied on `stream` after that write. The kept bytes are the last writers'; a later
        owner of the memory let go of does not receive the copy's bytes or change them; the new
        bytes are unknown until written (the rule writes them)."""
        obj, block = memory.obj, memory.block
        if not isinstance(obj, devbuf.Buffer):
            return
        capacity = obj.capacity()
        assert capacity == block.model.size - memory.start, (
            f"capacity() of {memory!r} is {capacity}")
        old_size, old_ptr = memory.nbytes, obj.ptr
        # At most twice the machine's allocations: a sequence resizing one buffer again and
        # again grows it no further.
        wanted = min(max(64, int(old_size * scale) // 64 * 64), 2 * self.backend.nbytes)
        on = self.stream_on(obj.device, stream)
        new_size = wanted if how == "resize" else old_size
        grows = wanted > capacity
        changes = new_size != old_size or grows
        try:
            if how == "resize":
                obj.resize(wanted, stream=on)
            else:
                obj.reserve(wanted, stream=on)
        except BufferError as refused:
            assert memory.anchored and changes, f"{how} of {memory!r} refused: {refused}"
            assert "was handed out through a protocol" in str(refused) and obj.nbytes == old_size
            RESIZES["refused: handed out"] += 1
            return
        except ValueError as refused:
            assert block.foreign and grows and "did not allocate" in str(refused), f"{how}: {refused}"
            RESIZES["refused: foreign memory"] += 1
            return
        except MemoryError as refused:
            assert block.fixed_size and grows and "fixed-size resource" in str(refused), f"{how}: {refused}"
            RESIZES["refused: a fixed-size block"] += 1
            return
        assert not (memory.anchored and changes), f"{how} of {memory!r}, handed out, changed its size"
        assert obj.nbytes == new_size and obj.capacity() >= wanted
        memory.nbytes = new_size
        if grows:
            RESIZES[f"{how}: new memory"] += 1
            # New memory from where the old came: the kept bytes the old memory's, once copied.
            kept = memory.expected[:min(old_size, new_size)].copy()
            grown = Block(obj, block.again)
            grown.model = np.zeros(obj.capacity(), np.uint8)
            grown.known = np.zeros(obj.capacity(), bool)
            grown.model[:kept.size], grown.known[:kept.size] = kept, True
            memory.block, memory.start = grown, 0
            memory.writer = None  # the copy is on `stream`, which later work on the buffer waits for
            if reuse:
                self.later_owner_of(block, value)
        else:
            RESIZES[f"{how}: in place" if changes else f"{how}: no change"] += 1
            assert obj.ptr == old_ptr
        # The bytes the buffer grew over that the model does not know: written now.
        known = memory.block.known
        if known is not None and not known[memory.start:memory.start + new_size].all():
            tail = obj[old_size:] if old_size < new_size else obj
            tail.fill(value, stream=on, blocking=blocking)
            memory.region(tail)[:] = value
            known[memory.start:memory.start + new_size] = True
            memory.writer = None if blocking else (on or obj.queue)
        if read:
            self.check(memory, obj.tobytes(stream=on), f"tobytes after {how}")

    def later_owner_of(self, block, value):
        """A later owner of memory from where `block` goes back writes it at once and lets go."""
        again = block.again()
        if again.kind == "device":
            again.fill(value)
        else:
            self.backend.raw_writes(again.ptr, again.nbytes, again.kind, value, again.device)
        again.close()
