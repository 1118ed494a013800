"""``irc.gpu``: arrays on the CUDA device for functions compiled with ``irc.compile(m, target="gpu")``.

    x = irc.gpu.to_device(np.ones((256, 256), np.float32))   # a DeviceArray
    y = exe.f(x, w)                                           # device in, DeviceArray out
    y.get()                                                   # a numpy copy

Compiled GPU functions also take cupy arrays, torch CUDA tensors and other objects with a
``__cuda_array_interface__`` or a CUDA ``__dlpack__`` without copying them (docs/gpu.md).  The
device code lives in ``irc.runtime.gpu``; this module only forwards to it, so importing it
needs neither pycuda nor a GPU.
"""

from __future__ import annotations


def to_device(a):
    """A copy of numpy array ``a`` in the memory of the default CUDA device (a ``DeviceArray``
    with ``.get()``, ``.shape`` and ``.dtype``); ``DeviceUnavailable`` where there is none."""
    from irc.runtime.gpu import driver

    return driver.to_device(a)


def unavailable_reason() -> str | None:
    """None when a CUDA device can be used here, else why not."""
    from irc.runtime.gpu import driver

    return driver.unavailable_reason()


def __getattr__(name: str):
    if name == "DeviceArray":
        from irc.runtime.gpu.arrays import DeviceArray

        return DeviceArray
    raise AttributeError(f"module 'irc.gpu' has no attribute '{name}'")
