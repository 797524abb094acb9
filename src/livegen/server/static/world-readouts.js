// The world panel's readouts and frame decoding (world.js): the chunk shown, the fps drawn, the
// input-to-frame latency of this page's own events, and a WebSocket frame as something drawable.

import { median } from "./connection.js";

const LATENCY_WINDOW = 30;

/** The ids of this page's events a chunk applied: the owner's `applied_event_ids`, or a joined
 * player's own in `applied_events` (each player numbers its own, so ids alone would mix them). */
function ownEventIds(meta, player) {
  if (!player) return meta.applied_event_ids || [];
  return (meta.applied_events || []).filter((event) => event.player === player).map((event) => event.event_id);
}

/** A chunk's first frame is on screen: its index, its model time, and each applied input's latency. */
export function showChunk(panel, meta, now) {
  panel.stats.lastChunkIndex = meta.chunk_index;
  const modelMs = meta.timings?.model_ms;
  const timing = typeof modelMs === "number" ? ` · model ${modelMs.toFixed(1)} ms` : "";
  panel.el.chunk.textContent = `#${meta.chunk_index}${timing} · ${panel.chunksAhead} ahead`;
  for (const id of ownEventIds(meta, panel.stats.player)) {
    const sentAt = panel.sentAt.get(id);
    if (sentAt == null) continue;
    panel.sentAt.delete(id);
    panel.stats.latenciesMs.push(Math.round(now - sentAt));
    if (panel.stats.latenciesMs.length > LATENCY_WINDOW) panel.stats.latenciesMs.shift();
    const typical = Math.round(median(panel.stats.latenciesMs));
    panel.el.latency.textContent = `${Math.round(now - sentAt)} ms (median ${typical} ms)`;
  }
}

/** Frames drawn in the last second. */
export function showFps(panel, now) {
  while (panel.drawTimes.length && now - panel.drawTimes[0] > 1000) panel.drawTimes.shift();
  const fps = panel.drawTimes.length;
  if (fps !== panel.stats.fps) {
    panel.stats.fps = fps;
    panel.el.fps.textContent = panel.ws ? String(fps) : "–";
  }
}

/** A WebSocket frame (`rgb24` bytes, or an encoded image) as ImageData or an ImageBitmap. */
export async function decodeFrame(data, meta) {
  if (meta.format === "rgb24") {
    const rgb = new Uint8Array(data);
    const rgba = new Uint8ClampedArray(meta.width * meta.height * 4);
    for (let i = 0, j = 0; i < rgb.length; i += 3, j += 4) {
      rgba[j] = rgb[i];
      rgba[j + 1] = rgb[i + 1];
      rgba[j + 2] = rgb[i + 2];
      rgba[j + 3] = 255;
    }
    return new ImageData(rgba, meta.width, meta.height);
  }
  return createImageBitmap(new Blob([data], { type: `image/${meta.format || "png"}` }));
}
