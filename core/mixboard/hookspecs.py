"""The hooks a mixboard plugin implements.

A plugin is a module published under the entry-point group ``mixboard``::

    # pyproject.toml
    [project.entry-points.mixboard]
    acme = "acme_mixboard.plugin"

    # acme_mixboard/plugin.py
    from mixboard import hookimpl
    from acme_mixboard.attention import AcmeAttention

    @hookimpl
    def mixboard_backends():
        return [AcmeAttention]

Hooks: ``mixboard_backends`` (backend classes), ``mixboard_kinds`` (new
kinds), ``mixboard_devices`` (out-of-tree torch devices). A plugin answers
any of them.
"""

import pluggy

hookspec = pluggy.HookspecMarker("mixboard")
hookimpl = pluggy.HookimplMarker("mixboard")


@hookspec
def mixboard_backends():
    """Return the Backend subclasses this plugin provides (a list of classes).

    Example::

        @hookimpl
        def mixboard_backends():
            return [AcmeAttention, AcmeMamba2]
    """


@hookspec
def mixboard_kinds():
    """Return new kinds this plugin defines (a list of ``mixboard.Kind``).

    The built-in kinds (the mixers attention, mamba1, mamba2, short_conv and
    the dense linear, rms_norm, rotary, embedding, argmax, moe) live in core;
    a kind defined here may be served by backends of any plugin. Naming its
    conformance adapter (``"module:NAME"``, imported only when the kit runs)
    lets ``mixboard check`` serve its backends. Example::

        @hookimpl
        def mixboard_kinds():
            return [Kind(name="retention", spec=RetentionSpec, impl=RetentionImpl,
                         state_spec=retention_state, description="RetNet retention",
                         conformance="acme_retention.conformance:RETENTION")]

    ``RetentionSpec`` (a frozen ``mixboard.MixerSpec`` dataclass),
    ``RetentionImpl`` (the impl interface, whose docstring is the forward
    contract), ``retention_state`` (spec -> ``mixboard.StateSpec``) and the
    adapter are the plugin's own. docs/conformance.md section 5 ("A kind your
    plugin defines") writes a complete kind package, ``acme-ema``: the
    spec, weights, impl interface, state, oracle, conformance adapter, a
    backend and its tests.
    """


@hookspec
def mixboard_devices():
    """Return the out-of-tree torch devices this plugin describes (a list of ``mixboard.Device``).

    torch knows a vendor's device only through its one out-of-tree slot,
    ``privateuse1``, renamed by the vendor's extension
    (``torch.utils.rename_privateuse1_backend("acme")``). Describing it lets
    ``mixboard backends --device acme`` simulate it from any machine,
    ``mixboard.detect()`` recognize it where torch has it (and ask ``arch``
    which architecture it is), and backends with ``devices = ("acme",)`` be
    selected there. The name may not be one of torch's own device types.
    Example::

        from mixboard import Device, hookimpl

        @hookimpl
        def mixboard_devices():
            return [Device("acme", "Acme NPU through torch_acme (privateuse1)",
                           archs=("acme2", "acme3"), arch=_this_machines_arch)]

        def _this_machines_arch():
            import torch_acme  # called only where torch has the device

            return torch_acme.arch_name(0)
    """
