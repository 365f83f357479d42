"""Built-in backends for the validation harness.

* :mod:`pldr_ref.backends.numpy32` -- the reference structure evaluated in float32 NumPy
  (``pldr_ref.backends.numpy32:Numpy32Backend``);
* :mod:`pldr_ref.backends.torch_backend` -- an independent PyTorch implementation
  (``pldr_ref.backends.torch_backend:TorchBackend``; needs the optional ``torch`` extra).
"""
