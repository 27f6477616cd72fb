"""ctypes mirror of include/sdpa.h and the loader of libsdpa.so.

Everything here follows the header field by field; when the header changes,
this file changes with it (tests/python/test_cpu.py::test_abi_layout compiles a
small C program against the header and compares every size and offset).

The library is looked for, in order:
  1. $SDPA_LIBRARY (a path to the .so),
  2. beside this package (python/sdpa/libsdpa.so, where `pip install .` puts it),
  3. the CMake build folder of a repository checkout (../../build/libsdpa.so),
  4. the install prefix (sys.prefix/lib, lib64) and ctypes.util.find_library("sdpa").
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

# ---- constants (sdpa.h) --------------------------------------------------------------

SDPA_OK = 0
SDPA_ERR_INVALID_ARGUMENT = 1
SDPA_ERR_NOT_SUPPORTED = 2
SDPA_ERR_OUT_OF_MEMORY = 3
SDPA_ERR_CUDA = 4
SDPA_ERR_INTERNAL = 5

SDPA_DTYPE_F32 = 0
SDPA_DTYPE_F16 = 1
SDPA_DTYPE_BF16 = 2
SDPA_DTYPE_I32 = 3

SDPA_DEVICE_CPU = 0
SDPA_DEVICE_CUDA = 1

SDPA_ALIGN_BOTTOM_RIGHT = 0
SDPA_ALIGN_TOP_LEFT = 1

SDPA_MAX_RANK = 5

_STATUS_NAMES = {
    SDPA_OK: "SDPA_OK",
    SDPA_ERR_INVALID_ARGUMENT: "SDPA_ERR_INVALID_ARGUMENT",
    SDPA_ERR_NOT_SUPPORTED: "SDPA_ERR_NOT_SUPPORTED",
    SDPA_ERR_OUT_OF_MEMORY: "SDPA_ERR_OUT_OF_MEMORY",
    SDPA_ERR_CUDA: "SDPA_ERR_CUDA",
    SDPA_ERR_INTERNAL: "SDPA_ERR_INTERNAL",
}

# C enums are int-sized on every ABI sdpa targets (gcc/clang, x86-64 and aarch64).
_enum = ctypes.c_int


# ---- structs (sdpa.h, in declaration order) --------------------------------------------

class sdpa_tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", _enum),
        ("rank", ctypes.c_int),
        ("shape", ctypes.c_int64 * SDPA_MAX_RANK),
        ("stride", ctypes.c_int64 * SDPA_MAX_RANK),
    ]


class sdpa_attn(ctypes.Structure):
    _fields_ = [
        ("device", _enum),
        ("stream", ctypes.c_void_p),
        ("num_threads", ctypes.c_int),
        ("q", sdpa_tensor),
        ("k", sdpa_tensor),
        ("v", sdpa_tensor),
        ("cu_seqlens_q", sdpa_tensor),
        ("cu_seqlens_k", sdpa_tensor),
        ("seqused_k", sdpa_tensor),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
        ("scale", ctypes.c_float),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", sdpa_tensor),
        ("bias", sdpa_tensor),
        ("causal", ctypes.c_int),
        ("align", _enum),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("dropout_p", ctypes.c_float),
        ("dropout_seed", ctypes.c_uint64),
        ("dropout_offset", ctypes.c_uint64),
        ("kernel", ctypes.c_char_p),
        ("reserved", ctypes.c_int64 * 8),
    ]


class sdpa_fwd_desc(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("attn", sdpa_attn),
        ("out", sdpa_tensor),
        ("lse", sdpa_tensor),
        ("probs", sdpa_tensor),
        ("cache_seqlens", sdpa_tensor),
        ("block_table", sdpa_tensor),
        ("cache_batch_idx", sdpa_tensor),
        ("k_new", sdpa_tensor),
        ("v_new", sdpa_tensor),
        ("rotary_cos", sdpa_tensor),
        ("rotary_sin", sdpa_tensor),
        ("rotary_interleaved", ctypes.c_int),
        ("num_splits", ctypes.c_int),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
        ("cache_leftpad", sdpa_tensor),
    ]


class sdpa_bwd_desc(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("attn", sdpa_attn),
        ("out", sdpa_tensor),
        ("lse", sdpa_tensor),
        ("dout", sdpa_tensor),
        ("dq", sdpa_tensor),
        ("dk", sdpa_tensor),
        ("dv", sdpa_tensor),
        ("dbias", sdpa_tensor),
        ("deterministic", ctypes.c_int),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
        ("dlse", sdpa_tensor),
    ]


class sdpa_merge_desc(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device", _enum),
        ("stream", ctypes.c_void_p),
        ("out_parts", sdpa_tensor),
        ("lse_parts", sdpa_tensor),
        ("out", sdpa_tensor),
        ("lse", sdpa_tensor),
    ]


class sdpa_kernel_info(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("op", ctypes.c_char_p),
        ("device", _enum),
        ("min_arch", ctypes.c_int),
        ("max_arch", ctypes.c_int),
        ("dtypes", ctypes.c_char_p),
        ("max_head_dim", ctypes.c_int),
        ("block_m", ctypes.c_int),
        ("block_n", ctypes.c_int),
        ("features", ctypes.c_char_p),
    ]


# ---- errors ---------------------------------------------------------------------------

class SdpaError(RuntimeError):
    """A failing libsdpa call (or an argument the binding rejects before the call).

    status:       the sdpa_status code (int), e.g. 1 = SDPA_ERR_INVALID_ARGUMENT
    status_name:  its name, e.g. "SDPA_ERR_INVALID_ARGUMENT"
    message:      sdpa_last_error(): a sentence naming the argument, its value and
                  what was expected
    """

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = _STATUS_NAMES.get(self.status, "SDPA_STATUS_%d" % self.status)
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))

    def __reduce__(self):
        return (type(self), (self.status, self.message))


# ---- loading ----------------------------------------------------------------------------

_HERE = os.path.dirname(os.path.abspath(__file__))
_NAMES = ("libsdpa.so", "libsdpa.dylib", "sdpa.dll")


def _candidates():
    env = os.environ.get("SDPA_LIBRARY")
    if env:
        yield env
        return  # an explicit choice is never second-guessed
    for n in _NAMES:
        yield os.path.join(_HERE, n)
    repo = os.path.normpath(os.path.join(_HERE, "..", ".."))
    if os.path.exists(os.path.join(repo, "include", "sdpa.h")):
        for n in _NAMES:
            yield os.path.join(repo, "build", n)
    for prefix in (sys.prefix, sys.base_prefix):
        for lib in ("lib", "lib64"):
            for n in _NAMES:
                yield os.path.join(prefix, lib, n)
    found = ctypes.util.find_library("sdpa")
    if found:
        yield found


_lib = None
_load_errors = []


def _declare(lib):
    P = ctypes.POINTER
    sig = {
        "sdpa_status_string": (ctypes.c_char_p, [_enum]),
        "sdpa_last_error": (ctypes.c_char_p, []),
        "sdpa_version": (ctypes.c_int, []),
        "sdpa_cuda_available": (ctypes.c_int, []),
        "sdpa_dtype_string": (ctypes.c_char_p, [_enum]),
        "sdpa_fwd_init": (None, [P(sdpa_fwd_desc)]),
        "sdpa_fwd": (_enum, [P(sdpa_fwd_desc)]),
        "sdpa_fwd_workspace_size": (_enum, [P(sdpa_fwd_desc), P(ctypes.c_size_t)]),
        "sdpa_bwd_init": (None, [P(sdpa_bwd_desc)]),
        "sdpa_bwd": (_enum, [P(sdpa_bwd_desc)]),
        "sdpa_bwd_workspace_size": (_enum, [P(sdpa_bwd_desc), P(ctypes.c_size_t)]),
        "sdpa_merge_init": (None, [P(sdpa_merge_desc)]),
        "sdpa_merge_states": (_enum, [P(sdpa_merge_desc)]),
        "sdpa_kernel_count": (ctypes.c_int, []),
        "sdpa_kernel_get": (_enum, [ctypes.c_int, P(sdpa_kernel_info)]),
        "sdpa_explain_fwd": (_enum, [P(sdpa_fwd_desc), ctypes.c_char_p, ctypes.c_size_t]),
        "sdpa_explain_bwd": (_enum, [P(sdpa_bwd_desc), ctypes.c_char_p, ctypes.c_size_t]),
    }
    declare(lib, sig)


def declare(lib, sig):
    """Sets restype and argtypes of lib's functions from sig, {name: (restype, argtypes)}
    (AttributeError where lib lacks one)."""
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args


def lib():
    """The loaded libsdpa (ctypes.CDLL), loading it on first use."""
    global _lib
    if _lib is not None:
        return _lib
    errors = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            continue
        try:
            cand = ctypes.CDLL(path)
            _declare(cand)
        except (OSError, AttributeError) as e:
            errors.append("%s: %s" % (path, e))
            continue
        _check_abi(cand, path)
        cand._sdpa_path = path
        _templates.clear()
        _lib = cand
        return _lib
    msg = ("libsdpa not found. Build it (cmake -B build && cmake --build build), "
           "`pip install .` at the repository root, or set SDPA_LIBRARY=/path/to/libsdpa.so.")
    if errors:
        msg += " Tried: " + "; ".join(errors)
    raise OSError(msg)


def library_path():
    return lib()._sdpa_path


# struct_size the library writes in its init functions, per descriptor type
_lib_sizes = {}


def init_struct_size(cls, init):
    """The struct_size that the library's init function for cls writes: how large it
    thinks that descriptor is. Init into a padded buffer (a newer library may write
    more than we know of)."""
    buf = ctypes.create_string_buffer(ctypes.sizeof(cls) + 4096)
    init(ctypes.cast(buf, ctypes.POINTER(cls)))
    return ctypes.c_size_t.from_buffer(buf).value


def _check_abi(cand, path):
    """The library's init functions say how large it thinks each descriptor is."""
    for cls, init in ((sdpa_fwd_desc, cand.sdpa_fwd_init), (sdpa_bwd_desc, cand.sdpa_bwd_init),
                      (sdpa_merge_desc, cand.sdpa_merge_init)):
        size = init_struct_size(cls, init)
        if size < ctypes.sizeof(ctypes.c_size_t) or size > ctypes.sizeof(cls) + 4096:
            raise OSError("%s: %s init wrote struct_size %d (expected %d): not a matching libsdpa"
                          % (path, cls.__name__, size, ctypes.sizeof(cls)))
        _lib_sizes[cls] = size


def _init_desc(cls):
    """A descriptor initialised by the library (struct_size and every default).

    Same size as this binding's struct (the common case): init in place. A newer
    library (larger struct): init a padded buffer, keep our prefix, and tell the
    library our size (it reads only struct_size bytes). An older library
    (smaller struct): its struct_size stays, so it ignores fields it lacks."""
    L = lib()
    init = {sdpa_fwd_desc: L.sdpa_fwd_init, sdpa_bwd_desc: L.sdpa_bwd_init,
            sdpa_merge_desc: L.sdpa_merge_init}[cls]
    ours = ctypes.sizeof(cls)
    theirs = _lib_sizes[cls]
    if theirs <= ours:
        d = cls()
        init(ctypes.byref(d))
        return d
    buf = ctypes.create_string_buffer(theirs)
    init(ctypes.cast(buf, ctypes.POINTER(cls)))
    d = cls.from_buffer_copy(buf.raw[:ours])
    d.struct_size = ours
    return d


# Scalars that each call used to write whatever their keyword's value: in the
# template they hold what the keywords' defaults write (all 0: the CPU device,
# no stream, no threads count, no scale, ... ), so that a call writes only those
# whose keyword differs (_core._fill_attn) and gets the same bytes as before,
# whatever defaults the loaded library's init chose.
_ATTN_KEYWORD_FIELDS = ("device", "stream", "num_threads", "max_seqlen_q", "max_seqlen_k",
                        "scale", "softcap", "causal", "dropout_p", "dropout_seed",
                        "dropout_offset")
_KEYWORD_FIELDS = {sdpa_fwd_desc: ("rotary_interleaved", "num_splits"),
                   sdpa_bwd_desc: ("deterministic",), sdpa_merge_desc: ()}

# The template of each descriptor type: _init_desc(cls) with the fields above
# zeroed. The library's init writes the same bytes every time, so a call copies
# them (one memcpy) instead of calling sdpa_*_init through ctypes. Reset when a
# library is loaded; holds bytes only (no array, no stream).
_templates = {}


def _template(cls):
    d = _init_desc(cls)
    if cls is not sdpa_merge_desc:
        for f in _ATTN_KEYWORD_FIELDS:
            setattr(d.attn, f, 0)
    for f in _KEYWORD_FIELDS[cls]:
        setattr(d, f, 0)
    return bytes(d)


def new_desc(cls):
    """A descriptor initialised by the library (struct_size and every default;
    the fields named above 0), a private copy of the cached template."""
    t = _templates.get(cls)
    if t is None:
        t = _templates[cls] = _template(cls)
    return cls.from_buffer_copy(t)


def last_error():
    msg = lib().sdpa_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(status):
    """Raise SdpaError(status, sdpa_last_error()) unless status is SDPA_OK."""
    if status != SDPA_OK:
        raise SdpaError(status, last_error())
