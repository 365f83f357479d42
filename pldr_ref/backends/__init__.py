"""Built-in backends for the validation harness (names for ``pldr-ref validate --backend``).

* ``pldr_ref.backends.reference:ReferenceBackend`` -- the float64 reference itself (the control);
* ``pldr_ref.backends.numpy32:Numpy32Backend`` -- the reference structure evaluated in float32 NumPy;
* ``pldr_ref.backends.torch_backend:TorchBackend`` (alias ``pldr_ref.backends.torch:TorchBackend``) -- an
  independent PyTorch implementation; needs the optional ``torch`` extra, imported only when created.
"""
