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

    The built-in kinds (attention, mamba1, mamba2, short_conv) live in core;
    a kind defined here may be served by backends of any plugin. Naming its
    conformance adapter (``"module:NAME"``, imported only when the kit runs)
    lets ``mixboard check`` serve its backends. Example::

        @hookimpl
        def mixboard_kinds():
            return [Kind(name="retention", spec=RetentionSpec, impl=RetentionImpl,
                         state_spec=retention_state, description="RetNet retention",
                         conformance="acme_retention.conformance:RETENTION")]
    """
