"""Arrays that live on the device: irc's own ``DeviceArray``, and other libraries' through the
CUDA array interface or DLPack, read without a copy.

``device_view(obj, ...)`` turns what a caller passed for a tensor parameter into a
``DeviceView`` (a device pointer, its shape and dtype, and what keeps the memory alive), or
None for a host array; anything that cannot be used as it is is a ``TypeError``/``ValueError``
that names the parameter: a DLPack tensor on the CPU, the wrong dtype or shape, a
non-contiguous array, a ``DeviceArray`` of another device context.

* ``__cuda_array_interface__`` (cupy, numba, torch CUDA tensors; version 2 or 3): ``data`` is
  the pointer, ``strides`` must be None or C-contiguous, ``mask`` None; a ``stream`` (v3) is
  work still pending on the producer's stream, so the device waits for everything first (a
  context synchronize: the interface gives a stream handle, and pycuda cannot wrap one).
* DLPack (``__dlpack__`` and ``__dlpack_device__``, JAX, torch, cupy): a CUDA or managed device
  only; the capsule is read with ctypes (a ``DLManagedTensor``), asked for with our stream so
  that the producer orders its work before ours, and kept until the call ends (its destructor
  then calls the producer's deleter, as the protocol says for an unconsumed capsule).

The device of a foreign pointer is not checked beyond DLPack's device id: the interface does
not say, and pycuda has no ``cuPointerGetAttribute``.  No pycuda is imported here.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
_DL_CODES = {0: "i", 1: "u", 2: "f", 6: "b"}  # kDLInt, kDLUInt, kDLFloat, kDLBool


@dataclass
class DeviceView:
    """A device array as a kernel sees it: a pointer (to the first element), shape and dtype,
    and ``keep`` (what owns the memory, held until the call ends)."""

    ptr: int
    shape: tuple
    dtype: np.dtype
    keep: object = None
    device: object = None  # irc's CudaDevice for a DeviceArray, else None


class DeviceArray:
    """An array in device memory: what ``irc.gpu.to_device`` returns and what compiled GPU
    functions return when they were given device arrays.  ``get()`` copies it to a numpy
    array; ``__cuda_array_interface__`` lets cupy, numba or torch (``torch.as_tensor``) use it
    without a copy.  The memory (a block of the device's pool) is returned to the pool when the
    array is garbage."""

    __slots__ = ("allocation", "ptr", "shape", "dtype", "device", "__weakref__")

    def __init__(self, allocation, shape, dtype, device, ptr: int | None = None):
        self.allocation = allocation
        self.ptr = int(allocation) if ptr is None else ptr
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.device = device

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def get(self) -> np.ndarray:
        """A numpy copy of the array (after the device's pending work)."""
        return self.device.copy_to_host(self)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None, "stream": None}

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"


def _contiguous(shape, strides, itemsize: int) -> bool:
    """Whether byte ``strides`` are C-contiguous for ``shape`` (a dimension of size 1 may have
    any stride, as numpy and DLPack producers leave them)."""
    expected = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p))]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(obj, what: str, stream_handle):
    device_type, device_id = (int(x) for x in obj.__dlpack_device__())
    if device_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
        where = {KDL_CPU: "the CPU", KDL_CUDA_HOST: "page-locked host memory"}.get(device_type, f"device type "
                                                                                     f"{device_type}")
        raise TypeError(f"{what} is a DLPack tensor on {where}, not on a CUDA device: pass a numpy array "
                        "(np.from_dlpack) or move it to the GPU")
    try:
        capsule = obj.__dlpack__(stream=stream_handle)
    except TypeError:  # a producer without the stream keyword
        capsule = obj.__dlpack__()
    address = _capsule_pointer(capsule, b"dltensor")
    t = DLManagedTensor.from_address(address).dl_tensor
    if t.dtype.lanes != 1 or t.dtype.code not in _DL_CODES:
        raise TypeError(f"{what}: DLPack dtype code {t.dtype.code} ({t.dtype.bits} bits, {t.dtype.lanes} lanes) "
                        "has no numpy equivalent here")
    dtype = np.dtype(f"{_DL_CODES[t.dtype.code]}{t.dtype.bits // 8}") if t.dtype.code != 6 else np.dtype(np.bool_)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] * dtype.itemsize for i in range(t.ndim))
    return DeviceView(int(t.data or 0) + int(t.byte_offset), shape, dtype, keep=(obj, capsule)), strides, device_id


def _from_interface(obj, what: str):
    cai = obj.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise ValueError(f"{what}: a masked CUDA array is not supported")
    dtype = np.dtype(cai["typestr"])
    shape = tuple(int(n) for n in cai["shape"])
    strides = cai.get("strides")
    return DeviceView(int(cai["data"][0]), shape, dtype, keep=obj), strides, cai.get("stream")


def device_view(obj, what: str, shape: tuple, dtype: np.dtype, device) -> DeviceView | None:
    """``obj`` as a device array for a parameter of ``shape`` and ``dtype`` (``what`` names the
    parameter in errors), or None when it is a host array (numpy's own ``__dlpack__`` included).
    ``device`` is the CudaDevice of the call (its ``stream_handle``, ``ordinal`` and ``synchronize``)."""
    if isinstance(obj, np.ndarray) or np.isscalar(obj) or isinstance(obj, (list, tuple)):
        return None
    if isinstance(obj, DeviceArray):
        if obj.device is not device:
            raise ValueError(f"{what} is a DeviceArray of another device context: copy it with .get() and "
                             "irc.gpu.to_device, or compile for that device")
        view, strides = DeviceView(obj.ptr, obj.shape, obj.dtype, keep=obj, device=device), None
    elif hasattr(obj, "__cuda_array_interface__"):
        view, strides, stream = _from_interface(obj, what)
        if stream not in (None, 0, 1, 2):  # work pending on another library's stream
            device.synchronize_context()
    elif hasattr(obj, "__dlpack_device__") and hasattr(obj, "__dlpack__"):
        view, strides, device_id = _from_dlpack(obj, what, device.stream_handle())
        if device_id != device.ordinal:
            raise ValueError(f"{what} is on CUDA device {device_id}, the function runs on device {device.ordinal}")
    else:
        return None
    if view.dtype != dtype:
        raise TypeError(f"{what} must have dtype {dtype}, got {view.dtype}")
    if view.shape != tuple(shape):
        raise ValueError(f"{what} must have shape {list(shape)}, got {list(view.shape)}")
    if strides is not None and not _contiguous(view.shape, strides, dtype.itemsize):
        raise ValueError(f"{what} must be C-contiguous (strides {tuple(strides)} for shape {list(view.shape)}): "
                         "make a contiguous copy on the device first")
    return view
