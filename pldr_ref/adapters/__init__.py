"""Adapters: validate an existing model implementation without writing a backend.

* :mod:`pldr_ref.adapters.torch_module` -- a backend built from an ``nn.Module`` factory and a small declaration
  (parameter names, how to call it, dtype handling, switch values, and a stage map from golden trace names to
  module paths or recorded function calls).  ``docs/backends.md`` section 11 walks through it.
* :mod:`pldr_ref.adapters.stage_map` -- the declaration's vocabulary (``Output``, ``Input``, ``Call``, layouts),
  plain data without torch.
* :mod:`pldr_ref.adapters.torch_recorder` -- one recorded forward (hooks and the function-call recorder);
  :mod:`pldr_ref.adapters.param_names` -- golden parameter names -> the module's;
  :mod:`pldr_ref.adapters.switch_declaration` -- the switch values it computes, as ``Capabilities.switches``;
  :mod:`pldr_ref.adapters.declaration_check` -- the checks of the dry run before any case.
* :mod:`pldr_ref.adapters.released_v510` -- the stage map and call of the authors' released PyTorch v510 module
  names (the code itself is obtained by the user from the authors' repository; pldr_ref does not vendor it).

Importing this package imports no engine: torch is imported when a :class:`~pldr_ref.adapters.torch_module.
TorchModuleBackend` is created.
"""
