"""Small portable ops that several backends need, written once.

* ``checks``: input validation whose errors name the layer, what was
  expected and what arrived; ``build_impl`` makes a named impl.
* ``slots``: gather and scatter of per-sequence state records by slot.
* ``causal_conv``: depthwise causal conv over a ragged batch with the conv
  state carried in slots (Mamba1, Mamba2 and ShortConv all need it).
* ``slot_step``: a step as the backends of those kinds see it (decodes'
  slots, prefills, slot checks, the conv index), planned once per group.
* ``huge_pages``: a large host tensor backed by 2 MB pages where Linux
  allows (a runner's pools, a CPU backend's weights).

These modules import torch; import them where a backend is built.
"""
