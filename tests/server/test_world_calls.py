"""World sessions over WebRTC (``/v1/worlds/calls``) against a real server, with an aiortc caller.

The server runs ``tiny-world``; the caller (``livegen.client.world_call``)
offers a receive-only video section and a data channel, plays the session,
steers it on the channel and decodes the track. Steers are checked in the
decoded video by what survives a lossy codec: the room's mean colour, which a
theme word in the prompt changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import httpx
import numpy as np
import pytest

from livegen.client.world_call import WorldCaller
from livegen.models import Registry
from livegen.server.config import ServerConfig
from livegen.server.thread import ServerThread

RIGHT = {"track": "action", "schema": "livegen.action.v1", "data": {"action": "right"}}


@pytest.fixture(scope="module")
def world_server() -> Iterator[ServerThread]:
    with ServerThread(ServerConfig(api_key=None, world_model="tiny-world", voice_model="none")) as server:
        server.wait_ready(timeout=120)
        yield server


def mean_colour(frames: list[np.ndarray]) -> np.ndarray:
    return np.mean([frame.reshape(-1, 3).mean(0) for frame in frames], axis=0)


async def chunk(caller: WorldCaller, predicate: Callable[[dict[str, object]], bool]) -> dict[str, object]:
    return await caller.wait_for(lambda e: e["type"] == "world.chunk" and predicate(e), 30, "world.chunk")


@pytest.mark.parametrize("codec", ["VP8", "H264"])
async def test_a_call_plays_the_world_and_a_steer_on_the_channel_shows_in_the_video(
    world_server: ServerThread, codec: str
) -> None:
    caller = WorldCaller(world_server.http_url, codec=codec)
    try:
        await caller.connect()
        session = {"seed": 3, "prompt": "a forest room", "frames_per_chunk": 1, "max_chunks_ahead": 1}
        caller.send({"type": "session.update", "session": {**session, "output": {"format": "png"}}})
        created = (await caller.event("session.created"))["session"]
        assert created["output"]["format"] == "rgb24"  # the track encodes raw frames, once
        before = await chunk(caller, lambda e: e["chunk_index"] == 8)
        forest = mean_colour([f.rgb for f in await caller.frames_from(before["video_pts"], 4)])

        caller.send({"type": "world.event", "event_id": 1, "prompt": "a lava room", "controls": [RIGHT]})
        accepted = await caller.event("world.event.accepted")
        assert accepted["event_id"] == 1 and accepted["status"] == "accepted"
        applied = await chunk(caller, lambda e: 1 in e["applied_event_ids"])
        assert isinstance(applied["video_pts"], int) and applied["video_pts"] > before["video_pts"]
        lava = mean_colour([f.rgb for f in await caller.frames_from(applied["video_pts"], 4)])
        # The theme is the room's colours: a steer the decoded video shows, whatever the codec lost.
        assert np.abs(lava - forest).sum() > 60, (forest, lava)
        assert lava[0] > forest[0] + 20  # lava is redder than the forest

        caller.send({"type": "session.close"})
        await caller.event("session.closed")
    finally:
        await caller.close()


async def test_the_track_is_the_ack_so_nothing_is_made_far_ahead_of_what_is_sent(
    world_server: ServerThread,
) -> None:
    """``asap`` with one chunk ahead, and a caller that acks every chunk at once and far ahead: on
    a socket that makes chunks as fast as the model goes; on a call the track's send position is
    the only ack, so chunks come at the frame clock, one ahead of the frames the track sent."""
    caller = WorldCaller(world_server.http_url)
    try:
        await caller.connect()
        session = {"seed": 1, "pacing": "asap", "frames_per_chunk": 1, "max_chunks_ahead": 1}
        caller.send({"type": "session.update", "session": session})
        await caller.event("session.created")
        for _ in range(40):
            await asyncio.sleep(0.05)
            caller.send({"type": "chunk.ack", "chunk_index": 10_000})
            headers = [e for e in caller.events if e["type"] == "world.chunk"]
            # Each header was made once the chunk before it started on the track (its ack); frames
            # in flight between the track and this caller's decoder are the slack.
            assert len(headers) <= len(caller.frames) + 4, (len(headers), len(caller.frames))
        assert len(headers) >= 10  # it plays
        assert not [e for e in caller.events if e["type"] == "error"]
        pts = [e["video_pts"] for e in headers]
        assert pts == sorted(pts) and len(set(pts)) == len(pts)
    finally:
        await caller.close()


async def test_a_reset_and_bad_input_on_the_channel_answer_as_on_the_socket(
    world_server: ServerThread,
) -> None:
    caller = WorldCaller(world_server.http_url)
    try:
        await caller.connect()
        caller.send({"type": "world.event", "event_id": 1, "prompt": "x"})
        assert (await caller.event("error"))["error"]["code"] == "session_not_created"
        caller.send({"type": "session.update", "session": {"seed": 2, "frames_per_chunk": 1}})
        await caller.event("session.created")
        caller.channel.send("not json")
        caller.channel.send('{"type": "chunk.ack", "chunk_index": -1, "at": "middle"}')
        await caller.wait_for(lambda e: sum(x["type"] == "error" for x in caller.events) >= 3, 20, "errors")
        codes = [e["error"]["code"] for e in caller.events if e["type"] == "error"][1:]
        assert codes == ["invalid_json", "invalid_request"]
        await chunk(caller, lambda e: e["chunk_index"] >= 3)
        caller.send({"type": "world.reset"})
        await caller.event("world.reset.done")
        after = caller.events.index(next(e for e in caller.events if e["type"] == "world.reset.done"))
        restarted = await caller.wait_for(
            lambda e: e["type"] == "world.chunk" and caller.events.index(e) > after, 20, "chunk after reset"
        )
        assert restarted["chunk_index"] == 0
        await caller.frames_from(restarted["video_pts"], 2)  # the track plays on after the reset
    finally:
        await caller.close()


async def test_bad_offers_and_keys_are_refused_with_clear_errors(
    start_server: Callable[..., ServerThread],
) -> None:
    server = start_server(world_model="tiny-world", voice_model="none", api_key="sk-world")
    server.wait_ready(timeout=120, verify=True)
    url = f"{server.http_url}/v1/worlds/calls"
    auth = {"Authorization": "Bearer sk-world", "Content-Type": "application/sdp"}

    http = httpx.AsyncClient(timeout=30)
    without_key = await http.post(url, content="v=0\r\n", headers={"Content-Type": "application/sdp"})
    assert without_key.status_code == 401
    expired = {**auth, "Authorization": "Bearer ek_not_minted"}
    refused = await http.post(url, content="v=0\r\n", headers=expired)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"

    async def refusal(sdp: str) -> dict[str, str]:
        response = await http.post(url, content=sdp, headers=auth)
        assert response.status_code == 400, response.text
        error: dict[str, str] = response.json()["error"]
        assert error["code"] == "invalid_offer" and error["param"] == "sdp"
        return error

    assert "not an SDP offer" in (await refusal("hello"))["message"]
    caller = WorldCaller(server.http_url, key="sk-world")
    try:
        await caller.pc.setLocalDescription(await caller.pc.createOffer())
        good = caller.pc.localDescription.sdp
        video, channel = good.split("m=application")
        head, _ = video.split("m=video")
        assert "no video media section" in (await refusal(head + "m=application" + channel))["message"]
        no_channel = video
        assert "no data channel" in (await refusal(no_channel))["message"]
        sending_only = good.replace("a=recvonly", "a=sendonly")
        assert "does not receive video" in (await refusal(sending_only))["message"]
        no_codec = "\r\n".join(line for line in good.split("\r\n") if not line.startswith("a=rtpmap:"))
        assert "could not be negotiated" in (await refusal(no_codec))["message"]
        # The server goes on: the good offer is answered and plays.
        answered = await caller.offer(good)
        assert answered.status_code == 201 and answered.headers["content-type"].startswith("application/sdp")
        assert "m=video" in answered.text and "a=sendonly" in answered.text
    finally:
        await caller.close()
        await http.aclose()


async def test_an_ephemeral_key_opens_a_world_call_and_only_it_hangs_it_up(
    start_server: Callable[..., ServerThread],
) -> None:
    from livegen.client.webrtc import mint
    from livegen.models import Kind, default_registry
    from voice.scripted import registry

    both = Registry([*registry().entries(), *default_registry().entries(Kind.WORLD)])
    server = start_server(
        registry=both, voice_model="scripted-voice", world_model="procedural-world", api_key="sk-world"
    )
    server.wait_ready(timeout=60, verify=True)
    mine, other = (mint(server.http_url, api_key="sk-world")["value"] for _ in range(2))
    caller = WorldCaller(server.http_url, key=mine)
    try:
        await caller.connect()
        caller.send({"type": "session.update", "session": {"seed": 1}})
        header = await chunk(caller, lambda e: e["chunk_index"] == 1)
        await caller.frames_from(header["video_pts"], 1)
        hangup = f"{server.http_url}/v1/worlds/calls/{caller.call_id}/hangup"
        async with httpx.AsyncClient(timeout=10) as http:
            refused = await http.post(hangup, headers={"Authorization": f"Bearer {other}"})
            assert refused.status_code == 404 and refused.json()["error"]["code"] == "call_not_found"
        closed = asyncio.Event()
        caller.channel.on("close", closed.set)
        assert (await caller.hangup()).status_code == 200
        async with asyncio.timeout(20):  # the server lets the connection go
            await closed.wait()
    finally:
        await caller.close()


async def test_calls_past_the_limit_are_refused_and_the_live_one_plays_on(
    start_server: Callable[..., ServerThread],
) -> None:
    server = start_server(world_model="procedural-world", voice_model="none", webrtc_max_calls=1)
    server.wait_ready(timeout=60)
    first, second = WorldCaller(server.http_url), WorldCaller(server.http_url)
    try:
        await first.connect()
        refused = await second.offer()
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "too_many_sessions"
        first.send({"type": "session.update", "session": {"seed": 1}})
        header = await chunk(first, lambda e: e["chunk_index"] == 2)
        await first.frames_from(header["video_pts"], 1)
    finally:
        await first.close()
        await second.close()
