// The world panel's WebRTC link: one call to /v1/worlds/calls (docs/world-protocol.md, "WebRTC video").
//
// The page offers a receive-only video transceiver and the `world-events` data
// channel. JSON events travel on the channel as on the WebSocket; the frames
// come on the video track (VP8 or H.264, decoded by the browser) instead of as
// binary messages, and the server acks each chunk itself when its track sends
// the chunk's first frame, so the page sends no `chunk.ack`. Each `world.chunk`
// header says where its chunk starts on the track (`video_pts`, 90 kHz from the
// track's first frame): the page matches it to the RTP time of the frames it
// shows (`requestVideoFrameCallback`), to tell when a chunk, and the input it
// applied, reached the screen. Every shown frame is drawn into the panel's
// canvas, so the panel reads the same whichever way it plays. The offer, the
// channel and the WebSocket look are call-link.js's, shared with the voice call.

import { PeerLink } from "./call-link.js";
import { api } from "./connection.js";

// A header's `video_pts` and a shown frame's RTP time may differ by a rounded tick: 1 ms.
const PTS_SLACK = 90;

export class WorldCallLink extends PeerLink {
  /** `onShown(meta, now)`: a frame was drawn; `meta` is the chunk header it starts, or null. */
  constructor(canvas, onShown) {
    super();
    this.canvas = canvas;
    this.onShown = onShown;
    this.video = null;
    this.headers = []; // chunk headers whose first frame has not been shown yet
    this.origin = null; // RTP timestamp of the first frame shown
  }

  /** Offer the video section and the data channel; resolves when the channel is open. */
  async open() {
    const key = api.tokenEndpoint ? await api.ephemeralKey({ type: "realtime" }) : api.key;
    const headers = { "Content-Type": "application/sdp" };
    if (key) headers.Authorization = `Bearer ${key}`;
    await this.dial(
      "world-events",
      (pc) => pc.addTransceiver("video", { direction: "recvonly" }),
      (sdp) => fetch("/v1/worlds/calls", { method: "POST", body: sdp, headers }),
    );
  }

  /** The track plays in a video element the size of a pixel, and every frame it shows is drawn. */
  play(stream) {
    const video = document.createElement("video");
    video.className = "world-video";
    video.muted = true;
    video.autoplay = true;
    video.playsInline = true;
    video.srcObject = stream;
    this.canvas.parentElement.append(video);
    this.video = video;
    video.play().catch(() => {});
    const onFrame = (now, metadata) => {
      if (this.video !== video) return;
      this.draw(now, metadata);
      video.requestVideoFrameCallback(onFrame);
    };
    video.requestVideoFrameCallback(onFrame);
  }

  draw(now, metadata) {
    this.canvas.getContext("2d").drawImage(this.video, 0, 0, this.canvas.width, this.canvas.height);
    let meta = null;
    const rtp = metadata.rtpTimestamp;
    if (typeof rtp === "number") {
      if (this.origin === null) this.origin = rtp;
      const pts = (rtp - this.origin) >>> 0; // RTP timestamps wrap at 2^32
      while (this.headers.length && this.headers[0].video_pts <= pts + PTS_SLACK) meta = this.headers.shift();
    }
    this.onShown(meta, now);
  }

  /** A `world.chunk` header: its frames are on the track from `video_pts` on. */
  chunk(meta) {
    this.headers.push(meta);
  }

  /** A reset: the chunks not shown yet are of the world before it. */
  forget() {
    this.headers = [];
  }

  close() {
    super.close();
    this.video?.remove();
    this.video = null;
  }
}
