"""Faults injected into a real engine at each stage of a step: the engine's
own code runs, one collaborator raises once at a chosen call."""

from __future__ import annotations

import mixboard_runner.engine as engine_module


class Trip:
    """Raises ``error`` on the ``at``-th call it sees, once; every other call passes."""

    def __init__(self, at: int, error: BaseException):
        self.at, self.error, self.calls = at, error, 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls == self.at:
            raise self.error


class FaultyImpl:
    """A layer's impl that trips before (or after) its forward ran."""

    def __init__(self, impl, trip: Trip, after: bool = False):
        self.impl, self.trip, self.after = impl, trip, after

    def forward(self, *args):
        if not self.after:
            self.trip()
        out = self.impl.forward(*args)
        if self.after:  # the layer's state is written, then the step fails
            self.trip()
        return out

    def __getattr__(self, name):
        return getattr(self.impl, name)


def inject(engine, stage: str, trip: Trip, monkeypatch) -> None:
    """Make ``stage`` of ``engine``'s steps call ``trip``."""
    if stage == "schedule":  # blocks and slots are allocated, no forward yet
        schedule = engine.scheduler.schedule

        def tripped_schedule():
            batch = schedule()
            trip()
            return batch

        monkeypatch.setattr(engine.scheduler, "schedule", tripped_schedule)
    elif stage == "metadata":
        build = engine_module.CommonBatchMetadata.build

        class Metadata:
            @staticmethod
            def build(*args, **kwargs):
                trip()
                return build(*args, **kwargs)

        monkeypatch.setattr(engine_module, "CommonBatchMetadata", Metadata)
    elif stage == "builder":
        builder = engine.builders[-1]

        def tripped_builder(common):
            trip()
            return builder(common)

        monkeypatch.setattr(engine, "builders", [*engine.builders[:-1], tripped_builder])
    elif stage in ("first layer", "last layer"):  # the last: every other layer's state is written already
        names = list(engine.runtimes)
        name = names[0] if stage == "first layer" else names[-1]
        impl, state, builder = engine.runtimes[name]
        monkeypatch.setitem(engine.runtimes, name, (FaultyImpl(impl, trip, after=stage == "last layer"), state, builder))
    elif stage == "sample":
        sample = engine_module.sample

        def tripped_sample(*args):
            trip()
            return sample(*args)

        monkeypatch.setattr(engine_module, "sample", tripped_sample)
    else:
        raise ValueError(stage)


STAGES = ("schedule", "metadata", "builder", "first layer", "last layer", "sample")
