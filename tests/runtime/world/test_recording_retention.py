"""Retention of world recordings (``runtime/world/recording.py``): by count and by bytes, oldest first,
never a recording still being written; ids are checked before any path is built."""

from __future__ import annotations

from pathlib import Path

from livegen.runtime.world.recording import EVENTS_FILE, Recordings, RecordingSettings


def make(root: Path, number: int, size: int) -> str:
    recording_id = f"rec_{number:016x}{'0' * 8}"
    (root / recording_id).mkdir()
    (root / recording_id / EVENTS_FILE).write_text("{}\n")
    (root / recording_id / "video.mp4").write_bytes(b"x" * size)
    return recording_id


def test_retention_by_bytes_deletes_the_oldest_and_spares_one_being_written(tmp_path: Path) -> None:
    recordings = Recordings(RecordingSettings(str(tmp_path), max_count=100, max_bytes=25_000))
    oldest, live, newer, newest = (make(tmp_path, n, 10_000) for n in range(1, 5))
    recordings.began(live)
    assert recordings.prune() == [oldest, newer]  # 40 kB over 25 kB: the oldest finished ones go
    assert sorted(p.name for p in tmp_path.iterdir()) == [live, newest]
    recordings.ended(live)
    assert recordings.prune() == []  # 20 kB fits


def test_retention_by_count_and_ids_that_are_not_recordings(tmp_path: Path) -> None:
    recordings = Recordings(RecordingSettings(str(tmp_path), max_count=2, max_bytes=10**9))
    made = [make(tmp_path, n, 10) for n in range(1, 4)]
    (tmp_path / "notes").mkdir()  # not a recording: never counted, never deleted
    assert recordings.prune() == made[:1]
    assert (tmp_path / "notes").exists()
    assert recordings.video_path(made[2]) == tmp_path / made[2] / "video.mp4"
    for bad in (made[0], "notes", "../notes", "rec_x", made[2] + "/../" + made[1]):
        assert recordings.video_path(bad) is None and recordings.events_path(bad) is None, bad
