"""The block size flash-attn's paged kernel takes: the declaration (backend.py's state_spec) asks for it
and the step's metadata (meta.py) holds a run to it."""

PAGE_MULTIPLE = 256  # "Paged KV cache block size must be divisible by 256" (flash-attn 2.8, flash_api.cpp)
