"""`kernel`: the tool's numba decorator, `numba.njit(cache=True, nogil=True)` whose cached
machine code loads without refreshing numba's whole target context.

Before it loads any cached overload, numba (0.59-0.68, `Cache.load_overload`) refreshes its
CPU target context: it imports ~60 modules of typing and lowering registries (arraymath,
linalg, random, typed containers, unicode, ...) and installs them, the first time in a
process. That is 0.09-0.13 s of CPU at the start of every command on the 2-core VM, under
numba's global compile lock, in front of the first batch (`replay run` on a 2-batch trace:
user time 0.71 -> 0.62 s, median wall 0.83 -> 0.73 s, 20 interleaved pairs). Loading needs
none of it. The cached object code refers only to:
- numba's runtime (NRT), which this loader initialises exactly as the refresh does;
- numba's C helpers, `Py_None` and the built-in exception objects, installed in LLVM's
  symbol table when the target context was created;
- the kernels it calls, which numba links into the cached library.
(The kernels use no parallel=True, typed containers or string hashing, whose runtime
symbols come with their registries.) A compilation (a cache miss, a new signature) still
refreshes the context, in numba's own compile path, so nothing is lost when the cache is
cold. If numba's private loader methods are not there (a future numba), the decorator
keeps numba's own cache.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar


def _import_numba_without_yaml() -> None:
    """Import numba without PyYAML where numba would not read YAML.

    numba imports PyYAML at start-up (`numba.core.config`) for one purpose: reading a
    `.numba_config.yaml` in the working directory. With none there it never uses it, and
    the import is 7-10 ms of every command on the 2-core VM. numba takes a missing PyYAML
    as "no file config" (its own `try: import yaml`), and the entry is removed again, so
    whatever imports PyYAML later (Dask's config) gets it. With the file present, or numba
    or PyYAML already imported, nothing changes."""
    if "numba" in sys.modules or "yaml" in sys.modules or os.path.exists(".numba_config.yaml"):
        return
    sys.modules["yaml"] = None  # type: ignore[assignment]  # numba's import raises ImportError
    try:
        import numba  # noqa: F401
    finally:
        if "yaml" in sys.modules and sys.modules["yaml"] is None:
            del sys.modules["yaml"]


def _import_metadata_lazily() -> None:
    """Make `importlib.metadata` a module that loads on its first use.

    numba imports it at start-up (`numba.core.entrypoints`) for one purpose: listing the
    installed packages' `numba_extensions` entry points, which it does before a
    dispatcher's first compilation. The import is email, zipfile, csv and socket, ~10-20 ms
    of every command on the 2-core VM; replay's kernels never list entry points when they
    load from the cache (`kernel`), and a compilation lists them as numba always does
    (the compiler refreshes its contexts, which loads the extensions). Whatever uses
    the module (numba's compiler, click's `__version__`) gets it whole on first access
    (`importlib.util.LazyLoader`)."""
    if "importlib.metadata" in sys.modules or "numba" in sys.modules:
        return
    import importlib
    import importlib.util

    spec = importlib.util.find_spec("importlib.metadata")
    if spec is None or spec.loader is None:
        return
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules["importlib.metadata"] = module
    importlib.metadata = module  # as the import system sets it
    spec.loader.exec_module(module)


_import_metadata_lazily()
_import_numba_without_yaml()

from numba import njit  # noqa: E402
from numba.core.caching import FunctionCache, NullCache  # noqa: E402
from numba.core.runtime import rtsys  # noqa: E402


def _type_arrays_without_numpy_ma() -> None:
    """Type a plain numpy array argument without importing `numpy.ma`.

    A dispatcher types each new kind of array argument (dtype, dimensions, layout) once per
    process in Python (`numba.core.typing.typeof`), and numba's rule for arrays first asks
    `isinstance(val, np.ma.MaskedArray)` to refuse masked arrays: numpy imports `numpy.ma`
    on that first access, 7 ms of every command that calls a kernel (2% of a 2-batch
    `replay run`), for a check that an array of exactly `np.ndarray` fails whatever the
    answer. This rule types such an array as numba's does (its dtype, dimensions, layout
    and writability) and passes every other value (a subclass, masked arrays among them,
    or a dtype numba refuses, with numba's own message) to numba's rule."""
    import numpy as np
    from numba.core import errors, types
    from numba.core.typing.typeof import typeof_impl
    from numba.np import numpy_support

    numbas_rule = typeof_impl.dispatch(np.ndarray)

    def typeof_ndarray(val: np.ndarray, c: Any) -> Any:
        if type(val) is not np.ndarray:
            return numbas_rule(val, c)
        try:
            dtype = numpy_support.from_dtype(val.dtype)
        except errors.NumbaNotImplementedError:
            return numbas_rule(val, c)
        layout = numpy_support.map_layout(val)
        return types.Array(dtype, val.ndim, layout, readonly=not val.flags.writeable)

    typeof_impl.register(np.ndarray)(typeof_ndarray)


_type_arrays_without_numpy_ma()


def _drop_llvm_lock_events() -> None:
    """Take numba's event hooks off llvmlite's lock, which every call into LLVM takes.

    numba registers two callbacks on that lock (`numba.core.base`) that broadcast a
    "numba:llvm_lock" event on each acquire and release, for one use: the time a
    compilation spent in LLVM, in a dispatcher's `get_metadata()["timers"]`. Loading
    the 6 cached kernels of a 2-batch `replay run` makes 881 calls into LLVM, and under
    cProfile the loads took 34 ms with the events, 19 ms without. The whole run took
    0.98x of its wall and CPU without them (whole processes alternating, 41 pairs,
    2-core VM). The lock itself stays; only the LLVM time in a compilation's timers goes
    (the compiler lock's time stays)."""
    import llvmlite.binding as ll

    lock = getattr(getattr(ll.ffi, "lib", None), "_lock", None)
    callbacks = getattr(lock, "_cblist", None)
    if isinstance(callbacks, list):
        callbacks[:] = [
            pair for pair in callbacks if getattr(pair[0], "__module__", "") != "numba.core.base"
        ]


_drop_llvm_lock_events()

F = TypeVar("F", bound=Callable[..., Any])


class _LoadWithoutRefresh(FunctionCache):
    """numba's function cache, loading an overload after initialising only the runtime."""

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        rtsys.initialize(target_context)  # what the skipped refresh does first
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)


def _source_key(py_func: Callable[..., Any]) -> tuple[float, int] | None:
    try:
        st = os.stat(py_func.__code__.co_filename)
    except OSError:
        return None
    return st.st_mtime, st.st_size


class _CacheOnFirstUse:
    """A kernel's cache object, made when the kernel first loads or compiles.

    Making one finds the kernel's cache folder, checks that it is writable with a
    temporary file (numba's `_CacheLocator.ensure_cache_path`) and stamps the index with
    the source file's hash: 0.11 ms of CPU and two system calls per kernel, paid at import
    for every kernel a module defines, where a command calls a few (a 2-batch `replay run`
    defines 28 and calls 7). The source file's modification time and size are taken at
    import, as numba's stamp was: a file changed since (edited while the command ran) would
    pair the code in memory with the new file's stamp, so that kernel neither loads nor
    saves cached code. numba asks its dispatcher's cache object for an overload under its
    compile lock, so the object is made once."""

    __slots__ = ("_cache", "_py_func", "_source")

    def __init__(self, py_func: Callable[..., Any]) -> None:
        self._py_func = py_func
        self._source = _source_key(py_func)
        self._cache: FunctionCache | NullCache | None = None

    def _made(self) -> FunctionCache | NullCache:
        if self._cache is None:
            # (no file to stat, such as a zipped package: numba's locators as they are)
            fresh = self._source is None or _source_key(self._py_func) == self._source
            self._cache = _LoadWithoutRefresh(self._py_func) if fresh else NullCache()
        return self._cache

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        return self._made().load_overload(sig, target_context)

    def save_overload(self, sig: Any, data: Any) -> None:
        self._made().save_overload(sig, data)

    def __getattr__(self, name: str) -> Any:  # flush, cache_path, ...
        return getattr(self._made(), name)


LOADS_WITHOUT_REFRESH = all(
    hasattr(FunctionCache, name) for name in ("_guard_against_spurious_io_errors", "_load_overload")
)


def _no_extensions() -> None:
    pass


def kernel(fn: F | None = None, *, inline: Literal["never", "always"] = "never") -> Any:
    """`@kernel` or `@kernel(inline="always")`: a nopython, GIL-free, disk-cached numba
    function (see the module docstring for how its cache loads).

    The kernels' type boundary: to mypy a kernel is `Any` where it is called. Its body is
    checked as Python against its annotations, but inside and between kernels numba
    passes numpy's scalars and Python's numbers interchangeably (an `int` parameter
    receives an `np.int64` element of an array), which numpy's stubs keep apart; the
    kernels' callers convert what leaves them (`int(...)`, `float(...)`)."""

    def wrap(function: F) -> F:
        # what `cache=True` does (`enable_caching`), with this module's cache in place of
        # numba's rather than after it: each cache object checks its folder is writable
        # with a temporary file, 92 kernels x 2 of them at every start otherwise
        dispatcher: Any = njit(nogil=True, inline=inline)(function)
        # numba lists every installed package's entry points for extensions before a
        # dispatcher's first call (5 ms of reading metadata, plus importing
        # importlib.metadata: `_import_metadata_lazily`); a kernel of replay takes numpy
        # arrays and numbers, whose types need no extension, and loads from the cache. A
        # compilation (a cache miss) still loads the extensions: numba's compiler
        # refreshes its contexts first (`numba.core.compiler.compile_extra`).
        dispatcher._compilation_chain_init_hook = _no_extensions
        if LOADS_WITHOUT_REFRESH:
            dispatcher._cache = _CacheOnFirstUse(dispatcher.py_func)
        else:
            dispatcher.enable_caching()
        return dispatcher

    return wrap if fn is None else wrap(fn)


_runtime_started = False


def initialize_runtime_in_background() -> None:
    """Start initialising numba's runtime (NRT) on a helper thread, once. The first kernel
    a process loads otherwise does it, under numba's lock: 35 ms of LLVM compiling the
    runtime's helper functions (llvmlite releases the GIL while LLVM works), which a
    `replay run` paid on its helper thread while the caller waited for the policy's kernel
    and the reader for its own. The console calls this once the command's modules are
    imported, so it overlaps the options' parsing and the opening of the trace instead.
    A command that imports numba only inside its function (`replay run`: `--help`
    imports nothing heavy) calls it right after importing this module, so that it
    overlaps the rest of its imports (0.1 s): creating numba's CPU target context and
    compiling the runtime's functions read none of the typing or lowering registries
    that later imports fill, and every numba module is imported by then (a kernel
    module's dispatchers wait for the context under numba's thread-safe property)."""
    global _runtime_started
    if _runtime_started or not LOADS_WITHOUT_REFRESH:
        return
    _runtime_started = True

    def initialize() -> None:
        from numba.core.registry import cpu_target

        rtsys.initialize(cpu_target.target_context)

    threading.Thread(target=initialize, name="replay-numba-runtime", daemon=True).start()


__all__ = ["LOADS_WITHOUT_REFRESH", "initialize_runtime_in_background", "kernel"]
