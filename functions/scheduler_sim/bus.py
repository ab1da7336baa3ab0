"""The completion-event bus of the simulated world: it accepts every batch it is given (the faults are the
publisher's gate: a crash before or after the publish, a throttled PutEvents) and remembers each event with who
published it and when, for the checker's outbox invariant."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scheduler.core.ports import OutcomeEvent
from scheduler_sim.records import Published

if TYPE_CHECKING:
    from scheduler_sim.simulation import Simulation


@dataclass
class SimEventBus:
    """An `EventPublisher` standing in for EventBridge."""

    sim: Simulation
    published: list[Published] = field(default_factory=list)

    def publish(self, events: Sequence[OutcomeEvent]) -> None:
        sim = self.sim
        actor = sim.current_actor().name if sim.stack else "sim"
        for event in events:
            self.published.append(Published(sim.clock.now(), actor, event))
        sim.trace(actor, f"published {', '.join(e.event_id for e in events)}")

    def event_ids(self) -> set[str]:
        return {p.event.event_id for p in self.published}
