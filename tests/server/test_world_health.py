"""The world service's readiness: not ready while the model loads, nor while the KV pool is full,
nor while one more session would push the model past real time."""

from __future__ import annotations

from typing import Any

from livegen.models.room import game
from livegen.models.world import KVGeometry
from livegen.runtime.world.capacity import StepCosts
from livegen.runtime.world.kv_pool import required_bytes
from livegen.runtime.world.scheduler import Scheduler
from livegen.server import ServerConfig, create_app
from livegen.server.world.service import WorldService

GEOMETRY = KVGeometry(
    num_layers=1, num_heads=1, head_dim=4, tokens_per_frame=2, window_frames=4, sink_frames=1
)


class KVModelStub:
    """Only the spec matters here: readiness reads the pool, nothing steps."""

    name = "kv-stub"
    spec = game.room_spec(kv=GEOMETRY)

    def new_kv_storage(self, num_pages: int) -> None:
        return None

    def step(self, ticks: Any, kv_storage: Any) -> list[Any]:
        raise AssertionError("not stepped in this test")

    def release(self, session_id: str) -> None:
        pass


def world_service() -> WorldService:
    app = create_app(ServerConfig(api_key=None, voice_model="none", world_model="procedural-world"))
    [service] = app.state.livegen.services
    assert isinstance(service, WorldService)
    return service


async def test_not_ready_until_the_model_is_loaded() -> None:
    service = world_service()
    assert service.health() == {"ready": False, "model": "procedural-world", "reason": "model loading"}
    await service.start()
    try:
        assert service.health()["ready"] is True
    finally:
        await service.stop()


async def test_not_ready_while_the_kv_pool_is_full() -> None:
    service = world_service()
    await service.start()
    await service.engine.scheduler.stop()  # type: ignore[union-attr]
    service.engine.scheduler = Scheduler(
        KVModelStub(), kv_budget_bytes=required_bytes(GEOMETRY, game.FRAMES_PER_CHUNK, 1)
    )
    assert service.health()["ready"] is True
    assert service.health()["kv"] == {"sessions": 0, "capacity": 1}
    service.engine.scheduler.pool.admit("one")  # type: ignore[union-attr]
    health = service.health()
    assert health["ready"] is False and health["reason"] == "KV pool full"
    service.engine.scheduler.pool.release("one")  # type: ignore[union-attr]
    assert service.health()["ready"] is True


class IdleRunner:
    """A session that is never due: only its admission matters here."""

    is_realtime = True
    spec = game.room_spec()

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id

    def restart_clock(self, phase: Any) -> None:
        pass

    def is_due(self, now: float, early_s: float = 0.0) -> bool:
        return False

    def next_deadline(self) -> None:
        return None


async def test_not_ready_while_one_more_session_would_miss_the_frame_clock() -> None:
    service = world_service()
    await service.start()
    scheduler = service.engine.scheduler
    assert scheduler is not None
    try:
        scheduler.add(IdleRunner("one"))  # type: ignore[arg-type]
        scheduler.admission.costs = StepCosts(scheduler.spec.fps)  # measured: 100 ms a step of one or two
        scheduler.admission.costs.record(4, 1, 0.1)
        scheduler.admission.costs.record(4, 2, 0.1)
        scheduler.admission.costs.record(4, 3, 0.3)
        assert service.health()["ready"] is True
        assert service.health()["realtime"]["capacity"] == {"4": 2}  # two in one 100 ms step: 40%
        scheduler.add(IdleRunner("two"))  # type: ignore[arg-type]
        health = service.health()
        assert health["ready"] is False and health["reason"] == "realtime capacity full"
        assert health["realtime"]["step_ms"] == {"4": {"1": 100.0, "2": 100.0, "3": 300.0}}
        assert health["realtime"]["sessions"] == 2 and health["realtime"]["load"] == 0.4
        scheduler.remove("two")
        assert service.health()["ready"] is True
    finally:
        await service.stop()


async def test_metrics_show_the_measured_step_per_batch_size_and_what_it_allows() -> None:
    app = create_app(ServerConfig(api_key=None, voice_model="none", world_model="procedural-world"))
    [service] = app.state.livegen.services
    await service.start()
    try:
        scheduler = service.engine.scheduler
        assert scheduler is not None
        scheduler.admission.costs = StepCosts(scheduler.spec.fps)
        scheduler.admission.costs.record(4, 1, 0.05)
        scheduler.admission.costs.record(4, 2, 0.1)
        text = app.state.livegen.metrics.render().decode()
        assert 'livegen_world_step_seconds{batch="2",frames="4"} 0.1' in text
        # 50 ms more a session, 4 steps a second: 4 sessions need 80%, 5 would need 100%
        assert 'livegen_world_realtime_capacity{frames="4"} 4.0' in text
        assert "livegen_world_realtime_sessions 0.0" in text
    finally:
        await service.stop()
