"""model: everything that touches tensors.

Loading weights, the Llama-family forward pass over the paged KV cache, the model runner that
turns a scheduler decision into one forward call, the sampler, and the machine's resources.
Rule: no queues and no policies; imports only ``core/`` and ``inferlab.kernels``.
"""
