"""Array adaptation: torch tensors, numpy arrays and DLPack objects -> sdpa_tensor.

No copies: the data pointer, the shape and the strides (in elements) are passed
as they are; the library validates them (last stride 1, shapes, dtypes) and its
error names the argument. Neither torch nor numpy is imported here unless the
caller already has one of their objects (or hands a DLPack object that needs one
of them to be read).

Every call adapts a handful of arrays, so this is the binding's hot path (the
host cost of a small eager call): types are classified once and remembered,
dtypes map through dicts, and an sdpa_tensor is written with one
struct.pack_into instead of a dozen ctypes attribute sets.
"""
from __future__ import annotations

import ctypes
import struct
import sys

from . import _lib
from ._lib import SdpaError, sdpa_tensor

CPU, CUDA = _lib.SDPA_DEVICE_CPU, _lib.SDPA_DEVICE_CUDA
CPU_DEVICE = (CPU, 0)
_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST = 1, 2, 3
_MAX_RANK = _lib.SDPA_MAX_RANK


def _torch():
    return sys.modules.get("torch")


def _numpy():
    return sys.modules.get("numpy")


# What each array type is, by exact type: 1 torch, 2 numpy (subclasses such as
# torch.nn.Parameter get their own entry). Filled on first sight of a type, so a
# call does one dict lookup per array instead of an isinstance chain.
_TORCH, _NUMPY = 1, 2
_KINDS = {}


def _kind(x):
    """_TORCH, _NUMPY or None (anything else: DLPack objects, lists, None)."""
    k = _KINDS.get(type(x))
    if k is None:
        t, np = _torch(), _numpy()
        if t is not None and isinstance(x, t.Tensor):
            k = _TORCH
        elif np is not None and isinstance(x, np.ndarray):
            k = _NUMPY
        else:
            return None
        _KINDS[type(x)] = k
    return k


def is_torch(x):
    return _kind(x) == _TORCH


def _invalid(msg):
    return SdpaError(_lib.SDPA_ERR_INVALID_ARGUMENT, msg)


def as_array(x, name):
    """x as a torch tensor or a numpy array (DLPack objects converted, no copy)."""
    if x is None or type(x) in _KINDS or _kind(x):
        return x
    if hasattr(x, "__dlpack__"):
        dev = None
        if hasattr(x, "__dlpack_device__"):
            try:
                dev = int(x.__dlpack_device__()[0])
            except Exception:  # pragma: no cover - odd producers
                dev = None
        errors = []
        order = ("numpy", "torch") if dev in (None, _DLPACK_CPU) else ("torch",)
        for lib_name in order:
            try:
                mod = __import__(lib_name)
            except ImportError as e:
                errors.append(str(e))
                continue
            try:
                return mod.from_dlpack(x)
            except Exception as e:  # e.g. numpy and bf16
                errors.append("%s.from_dlpack: %s" % (lib_name, e))
        raise _invalid("%s: a DLPack object (device type %s) that neither numpy nor torch could "
                       "import (%s)" % (name, dev, "; ".join(errors)))
    if isinstance(x, (list, tuple)) and name in ("cu_seqlens_q", "cu_seqlens_k", "seqused_k",
                                                  "cache_seqlens", "cache_batch_idx"):
        np = _numpy() or __import__("numpy")
        return np.asarray(x, dtype=np.int32)
    raise _invalid("%s: expected a torch.Tensor, a numpy.ndarray or a DLPack object, got %s"
                   % (name, type(x).__name__))


# sdpa dtype codes, by torch dtype and numpy dtype (built on first use: neither
# library is imported here)
_TORCH_CODES = {}
_NUMPY_CODES = {}
_NUMPY_NAMES = {"float32": _lib.SDPA_DTYPE_F32, "float16": _lib.SDPA_DTYPE_F16,
                "bfloat16": _lib.SDPA_DTYPE_BF16, "int32": _lib.SDPA_DTYPE_I32}


def _torch_code(x, name):
    code = _TORCH_CODES.get(x.dtype)
    if code is None:
        t = _torch()
        _TORCH_CODES.update({t.float32: _lib.SDPA_DTYPE_F32, t.float16: _lib.SDPA_DTYPE_F16,
                             t.bfloat16: _lib.SDPA_DTYPE_BF16, t.int32: _lib.SDPA_DTYPE_I32})
        code = _TORCH_CODES.get(x.dtype)
        if code is None:
            raise _invalid("%s: dtype %s is not supported (expected float32, float16, bfloat16 "
                           "or int32 for indices)" % (name, x.dtype))
    return code


def _numpy_code(x, name):
    # keyed by the dtype object (fast); by name for the rest (byte-swapped
    # dtypes and such are named like the native ones and were always accepted so)
    code = _NUMPY_CODES.get(x.dtype)
    if code is None:
        dn = x.dtype.name
        code = _NUMPY_NAMES.get(dn)
        if code is None:
            raise _invalid("%s: dtype %s is not supported (expected float32, float16 or int32 "
                           "for indices; numpy has no bfloat16: use torch)" % (name, dn))
        if x.dtype.isnative:
            _NUMPY_CODES[x.dtype] = code
    return code


def device_of(x):
    """(sdpa device, index) of an array."""
    if (_KINDS.get(type(x)) or _kind(x)) == _TORCH:  # (the get: no call when known)
        if x.is_cuda:  # cheaper than x.device, which builds a torch.device
            return CUDA, x.get_device()
        if x.is_cpu:
            return CPU_DEVICE
        raise _invalid("a tensor on device %s: sdpa runs on cpu and cuda only" % x.device)
    return CPU_DEVICE


def describe_device(dev):
    return "cpu" if dev[0] == CPU else "cuda:%d" % dev[1]


# sdpa_tensor (data, dtype, rank, shape[5], stride[5]) of each rank as one
# struct: the unused shape / stride entries are written as zeros, as
# sdpa_*_init leaves them.
_TENSOR_STRUCTS = tuple(
    struct.Struct("@Pii%dq%dx%dq%dx" % (r, 8 * (_MAX_RANK - r), r, 8 * (_MAX_RANK - r)))
    for r in range(_MAX_RANK + 1))
if (_TENSOR_STRUCTS[0].size != ctypes.sizeof(sdpa_tensor)
        or sdpa_tensor.stride.offset != struct.calcsize("@Pii") + 8 * _MAX_RANK):
    raise ImportError("sdpa: the packed sdpa_tensor layout differs from the ctypes mirror")


def fill(t, x, name):
    """Fill sdpa_tensor t (in place) from array x: pointer, dtype, shape, strides."""
    rank = x.ndim
    if rank > _MAX_RANK:
        raise _invalid("%s: rank %d exceeds SDPA_MAX_RANK (%d)" % (name, rank, _MAX_RANK))
    if (_KINDS.get(type(x)) or _kind(x)) == _TORCH:  # (the get: no call when known)
        code = _TORCH_CODES.get(x.dtype)
        if code is None:
            code = _torch_code(x, name)
        data = x.data_ptr()
        shape, strides = x.shape, x.stride()
        if not data and x.numel():
            raise _invalid("%s: null data pointer" % name)
    else:
        code = _numpy_code(x, name)
        data = x.ctypes.data
        item = x.itemsize
        shape = x.shape
        strides = []
        for s in x.strides:
            if s % item:
                raise _invalid("%s: byte stride %d is not a multiple of the element size %d"
                               % (name, s, item))
            strides.append(s // item)
        if not data and x.size:
            raise _invalid("%s: null data pointer" % name)
    _TENSOR_STRUCTS[rank].pack_into(t, 0, data, code, rank, *shape, *strides)


# ---- allocation with the inputs' library -------------------------------------------

def empty(like, shape, dtype=None):
    """Uninitialised array of `shape` from the library and device of `like`.
    dtype: None (like's dtype) or "float32"."""
    if is_torch(like):
        t = _torch()
        dt = like.dtype if dtype is None else getattr(t, dtype)
        if type(like) is t.Tensor:  # the same tensor as below, without a torch.device built
            return like.new_empty(tuple(shape), dtype=dt)
        return t.empty(tuple(shape), dtype=dt, device=like.device)
    np = _numpy()
    dt = like.dtype if dtype is None else np.dtype(dtype)
    return np.empty(tuple(shape), dtype=dt)


def zeros(like, shape, dtype=None):
    if is_torch(like):
        t = _torch()
        dt = like.dtype if dtype is None else getattr(t, dtype)
        return t.zeros(tuple(shape), dtype=dt, device=like.device)
    np = _numpy()
    dt = like.dtype if dtype is None else np.dtype(dtype)
    return np.zeros(tuple(shape), dtype=dt)


def int32_on(like, values):
    """An int32 array of values on like's device (for scalar cache_seqlens and such)."""
    if is_torch(like):
        t = _torch()
        return t.tensor(values, dtype=t.int32, device=like.device)
    np = _numpy()
    return np.asarray(values, dtype=np.int32)


def to_int32(x):
    """Index arrays of another integer dtype converted to int32 (a copy, small)."""
    if is_torch(x):
        if _TORCH_CODES.get(x.dtype) == _lib.SDPA_DTYPE_I32:  # the usual case, no torch lookups
            return x
        t = _torch()
        if x.dtype != t.int32 and not x.is_floating_point():
            return x.to(t.int32)
        return x
    np = _numpy()
    if x.dtype != np.int32 and np.issubdtype(x.dtype, np.integer):
        return x.astype(np.int32)
    return x


_raw_stream = None  # torch's getter of the current raw cudaStream_t on a device


def _find_raw_stream(t):
    # torch._C._cuda_getCurrentRawStream(index) (what torch.compile's generated
    # code calls) returns the same pointer as current_stream(index).cuda_stream
    # without building a torch.cuda.Stream (a few us a call)
    raw = getattr(t._C, "_cuda_getCurrentRawStream", None)
    if raw is None:  # pragma: no cover - older torch
        return lambda index: t.cuda.current_stream(index).cuda_stream
    return raw


def stream_of(dev):
    """cudaStream_t (int) of torch's current stream on dev, or None."""
    global _raw_stream
    if dev[0] != CUDA:
        return None
    t = _torch()
    if t is None:
        return None
    if _raw_stream is None:
        _raw_stream = _find_raw_stream(t)
    return _raw_stream(dev[1]) or None
