"""A Transformer on PyTorch's meta device (shapes, no storage), built without running its initialisers.

Why not plain ``with torch.device("meta"): Transformer(config)``: the constructor's random initialisation
(``nn.init.normal_`` in nn.Embedding and in our ``_init_weights``, ``kaiming_uniform_`` in nn.Linear) still runs on
the meta tensors, and the meta kernel of ``normal_`` is a Python reference (torch._refs) that imports torch._dynamo
on its first call: about 2 s on a cold server, paid by the sidebar's folder scan before the first page could show
its heading. On the meta device an initialiser has nothing to write, so skipping it changes no shape and no name.
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from core.nn.config import ModelConfig
from core.nn.model import Transformer

# the in-place initialisers a module's constructor may call: at the nn.init level (which dispatches the whole call
# to a mode) and as tensor methods (called directly, e.g. by a module's reset_parameters)
_INITIALISERS = frozenset({
    torch.nn.init.normal_, torch.nn.init.uniform_, torch.nn.init.trunc_normal_, torch.nn.init.kaiming_uniform_,
    torch.nn.init.kaiming_normal_, torch.nn.init.xavier_uniform_, torch.nn.init.xavier_normal_,
    torch.nn.init.orthogonal_, torch.nn.init.sparse_,
    torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.random_, torch.Tensor.exponential_,
})


class _SkipInitialisers(TorchFunctionMode):
    """Inside it, a random initialiser returns its tensor untouched. A torch-function mode is this thread's alone
    (like torch.device's own), so another session's thread building a real model meanwhile is initialised as usual."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _INITIALISERS:
            return args[0] if args else kwargs["tensor"]  # nn.init passes its tensor by keyword
        return func(*args, **kwargs)


def meta_transformer(config: ModelConfig) -> Transformer:
    """``Transformer(config)`` with every tensor on the meta device and no initialiser run: its names, shapes and
    parameter count are the real model's, its values undefined (load weights with ``load_state_dict(..., assign=True)``)."""
    with torch.device("meta"), _SkipInitialisers():  # the inner mode sees each call first
        return Transformer(config)
