"""Array adaptation: torch tensors, numpy arrays and DLPack objects -> sdpa_tensor.

No copies: the data pointer, the shape and the strides (in elements) are passed
as they are; the library validates them (last stride 1, shapes, dtypes) and its
error names the argument. Neither torch nor numpy is imported here unless the
caller already has one of their objects (or hands a DLPack object that needs one
of them to be read).
"""
from __future__ import annotations

import sys

from . import _lib
from ._lib import SdpaError, sdpa_tensor

CPU, CUDA = _lib.SDPA_DEVICE_CPU, _lib.SDPA_DEVICE_CUDA
_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST = 1, 2, 3


def _torch():
    return sys.modules.get("torch")


def _numpy():
    return sys.modules.get("numpy")


def is_torch(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def is_numpy(x):
    np = _numpy()
    return np is not None and isinstance(x, np.ndarray)


def _invalid(msg):
    return SdpaError(_lib.SDPA_ERR_INVALID_ARGUMENT, msg)


def as_array(x, name):
    """x as a torch tensor or a numpy array (DLPack objects converted, no copy)."""
    if x is None or is_torch(x) or is_numpy(x):
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


def sdpa_dtype(x, name):
    if is_torch(x):
        t = _torch()
        m = {t.float32: _lib.SDPA_DTYPE_F32, t.float16: _lib.SDPA_DTYPE_F16,
             t.bfloat16: _lib.SDPA_DTYPE_BF16, t.int32: _lib.SDPA_DTYPE_I32}
        if x.dtype in m:
            return m[x.dtype]
        raise _invalid("%s: dtype %s is not supported (expected float32, float16, bfloat16 or "
                       "int32 for indices)" % (name, x.dtype))
    dn = x.dtype.name
    m = {"float32": _lib.SDPA_DTYPE_F32, "float16": _lib.SDPA_DTYPE_F16,
         "bfloat16": _lib.SDPA_DTYPE_BF16, "int32": _lib.SDPA_DTYPE_I32}
    if dn in m:
        return m[dn]
    raise _invalid("%s: dtype %s is not supported (expected float32, float16 or int32 for "
                   "indices; numpy has no bfloat16: use torch)" % (name, dn))


def device_of(x):
    """(sdpa device, index) of an array."""
    if is_torch(x):
        d = x.device
        if d.type == "cpu":
            return CPU, 0
        if d.type == "cuda":
            return CUDA, d.index if d.index is not None else _torch().cuda.current_device()
        raise _invalid("a tensor on device %s: sdpa runs on cpu and cuda only" % d)
    return CPU, 0


def describe_device(dev):
    return "cpu" if dev[0] == CPU else "cuda:%d" % dev[1]


def fill(t, x, name):
    """Fill sdpa_tensor t (in place) from array x: pointer, dtype, shape, strides."""
    rank = x.ndim
    if rank > _lib.SDPA_MAX_RANK:
        raise _invalid("%s: rank %d exceeds SDPA_MAX_RANK (%d)" % (name, rank, _lib.SDPA_MAX_RANK))
    t.dtype = sdpa_dtype(x, name)
    t.rank = rank
    if is_torch(x):
        t.data = x.data_ptr() or None
        shape, strides = tuple(x.shape), x.stride()
    else:
        t.data = x.ctypes.data or None
        item = x.itemsize
        shape = x.shape
        strides = []
        for s in x.strides:
            if s % item:
                raise _invalid("%s: byte stride %d is not a multiple of the element size %d"
                               % (name, s, item))
            strides.append(s // item)
    for i in range(rank):
        t.shape[i] = int(shape[i])
        t.stride[i] = int(strides[i])
    numel = x.numel() if is_torch(x) else x.size
    if t.data is None and numel:
        raise _invalid("%s: null data pointer" % name)


def tensor(x, name):
    t = sdpa_tensor()
    fill(t, x, name)
    return t


# ---- allocation with the inputs' library -------------------------------------------

def empty(like, shape, dtype=None):
    """Uninitialised array of `shape` from the library and device of `like`.
    dtype: None (like's dtype) or "float32"."""
    if is_torch(like):
        t = _torch()
        dt = like.dtype if dtype is None else getattr(t, dtype)
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
        t = _torch()
        if x.dtype != t.int32 and not x.is_floating_point():
            return x.to(t.int32)
        return x
    np = _numpy()
    if x.dtype != np.int32 and np.issubdtype(x.dtype, np.integer):
        return x.astype(np.int32)
    return x


def stream_of(dev):
    """cudaStream_t (int) of torch's current stream on dev, or None."""
    if dev[0] != CUDA:
        return None
    t = _torch()
    if t is None:
        return None
    return t.cuda.current_stream(dev[1]).cuda_stream or None
