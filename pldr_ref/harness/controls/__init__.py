"""The harness's own controls: deliberately broken backends (torch, engine and switch mutants) that
it must fail, the false-positive battery it must pass, and the verdict power of logits-only
backends (``docs/mutations.md``, ``docs/tolerances.md``).
"""
