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
// canvas, so the panel reads the same whichever way it plays. `WorldCallLink`
// looks enough like a WebSocket (send, onmessage, onclose, readyState, close)
// for world.js to drive either.

import { api } from "./connection.js";

// How long the offer, ICE and the data channel may take before the page falls back to the WebSocket.
const CONNECT_TIMEOUT_MS = 8000;
// A header's `video_pts` and a shown frame's RTP time may differ by a rounded tick: 1 ms.
const PTS_SLACK = 90;

export class WorldCallLink {
  /** `onShown(meta, now)`: a frame was drawn; `meta` is the chunk header it starts, or null. */
  constructor(canvas, onShown) {
    this.canvas = canvas;
    this.onShown = onShown;
    this.readyState = WebSocket.CONNECTING;
    this.onmessage = null;
    this.onclose = null;
    this.pc = null;
    this.channel = null;
    this.video = null;
    this.callId = null;
    this.headers = []; // chunk headers whose first frame has not been shown yet
    this.origin = null; // RTP timestamp of the first frame shown
  }

  /** Offer the video section and the data channel; resolves when the channel is open. */
  async open() {
    if (typeof RTCPeerConnection === "undefined") throw new Error("this browser has no WebRTC");
    const key = api.tokenEndpoint ? await api.ephemeralKey({ type: "realtime" }) : api.key;
    const pc = new RTCPeerConnection();
    this.pc = pc;
    pc.addTransceiver("video", { direction: "recvonly" });
    this.channel = pc.createDataChannel("world-events");
    this.channel.onmessage = (event) => this.onmessage?.({ data: event.data });
    let timer = null;
    const opened = new Promise((resolve, reject) => {
      this.channel.onopen = resolve;
      timer = setTimeout(() => reject(new Error("the call did not connect (ICE)")), CONNECT_TIMEOUT_MS);
    });
    pc.ontrack = (event) => this.play(event.streams[0] || new MediaStream([event.track]));
    pc.onconnectionstatechange = () => {
      if (["failed", "closed"].includes(pc.connectionState)) this.ended(`the call ${pc.connectionState}`);
    };
    await pc.setLocalDescription(await pc.createOffer());
    const headers = { "Content-Type": "application/sdp" };
    if (key) headers.Authorization = `Bearer ${key}`;
    const response = await fetch("/v1/worlds/calls", { method: "POST", body: pc.localDescription.sdp, headers });
    if (!response.ok) {
      clearTimeout(timer);
      const body = await response.json().catch(() => ({}));
      throw new Error(body.error?.message || `/v1/worlds/calls answered HTTP ${response.status}`);
    }
    this.callId = (response.headers.get("Location") || "").split("/").pop();
    await pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
    await opened;
    clearTimeout(timer);
    this.channel.onclose = () => this.ended("the server ended the call");
    this.readyState = WebSocket.OPEN;
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

  send(text) {
    if (this.readyState === WebSocket.OPEN) this.channel.send(text);
  }

  ended(words) {
    if (this.readyState === WebSocket.CLOSED) return;
    const wasOpen = this.readyState === WebSocket.OPEN;
    this.close();
    if (wasOpen) this.onclose?.({ code: 1000, reason: words });
  }

  close() {
    this.readyState = WebSocket.CLOSED;
    this.channel?.close();
    this.pc?.close();
    this.video?.remove();
    this.video = null;
  }
}
