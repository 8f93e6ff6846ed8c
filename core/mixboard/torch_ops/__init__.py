"""The portable PyTorch backends of the dense kinds, shipped with mixboard
itself (entry point ``torch_ops``): any device torch runs, every dtype. A
model runs on these alone; faster ones (``mixboard-cpu``, a vendor's) win
by priority where they serve."""
