// The voice panel's WebRTC link: one call to /v1/realtime/calls with an ephemeral key.
//
// The browser's microphone track goes to the server as Opus (the browser cancels
// echo, suppresses noise and absorbs jitter); the answer comes back on the same
// audio track and plays through an <audio> element. JSON events travel on the
// `oai-events` data channel, as on the WebSocket. `CallLink` looks enough like a
// WebSocket (send, onmessage, onclose, readyState, close) for voice.js to drive
// either. The server's API key never takes part: the call carries only an
// `ek_` key (connection.js `api.ephemeralKey`).

import { api } from "./connection.js";

// How long ICE and the data channel may take before the page falls back to the WebSocket.
const CONNECT_TIMEOUT_MS = 8000;

// A 100 ms window of the answer track louder than this counts as audible (stats.trackAudibleMs).
const AUDIBLE_RMS = 0.01;

export class CallLink {
  constructor(stats) {
    this.stats = stats;
    this.meter = null;
    this.meterTimer = null;
    this.readyState = WebSocket.CONNECTING;
    this.onmessage = null;
    this.onclose = null;
    this.pc = null;
    this.channel = null;
    this.callId = null;
    this.key = null;
    this.audio = null;
    this.remoteStream = null;
  }

  /** Offer the microphone and the data channel; resolves when the channel is open. */
  async open(microphone, model) {
    if (typeof RTCPeerConnection === "undefined") throw new Error("this browser has no WebRTC");
    this.key = await api.ephemeralKey({ type: "realtime", model });
    const pc = new RTCPeerConnection();
    this.pc = pc;
    for (const track of microphone.getAudioTracks()) pc.addTrack(track, microphone);
    this.channel = pc.createDataChannel("oai-events");
    this.channel.onmessage = (event) => this.onmessage?.({ data: event.data });
    const opened = new Promise((resolve, reject) => {
      this.channel.onopen = resolve;
      setTimeout(() => reject(new Error("the call did not connect (ICE)")), CONNECT_TIMEOUT_MS);
    });
    pc.ontrack = (event) => this.play(event.streams[0] || new MediaStream([event.track]));
    pc.onconnectionstatechange = () => {
      if (["failed", "closed"].includes(pc.connectionState)) this.ended(`the call ${pc.connectionState}`);
    };
    await pc.setLocalDescription(await pc.createOffer());
    const response = await fetch("/v1/realtime/calls", {
      method: "POST",
      body: pc.localDescription.sdp,
      headers: { Authorization: `Bearer ${this.key}`, "Content-Type": "application/sdp" },
    });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new Error(body.error?.message || `/v1/realtime/calls answered HTTP ${response.status}`);
    }
    this.callId = (response.headers.get("Location") || "").split("/").pop();
    await pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
    await opened;
    this.channel.onclose = () => this.ended("the server ended the call");
    this.readyState = WebSocket.OPEN;
  }

  play(stream) {
    this.remoteStream = stream;
    this.audio = new Audio();
    this.audio.autoplay = true;
    this.audio.srcObject = stream;
    this.audio.play().catch(() => {});
    this.listen(stream);
  }

  /** Measure what the answer track plays (for the page's stats and its tests). */
  listen(stream) {
    this.meter = new AudioContext();
    const analyser = this.meter.createAnalyser();
    analyser.fftSize = 2048;
    this.meter.createMediaStreamSource(stream).connect(analyser);
    this.meter.resume();
    const samples = new Float32Array(analyser.fftSize);
    this.stats.trackAudibleMs = 0;
    this.meterTimer = setInterval(() => {
      analyser.getFloatTimeDomainData(samples);
      let sum = 0;
      for (const sample of samples) sum += sample * sample;
      if (Math.sqrt(sum / samples.length) > AUDIBLE_RMS) this.stats.trackAudibleMs += 100;
    }, 100);
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
    if (this.audio) this.audio.srcObject = null;
    clearInterval(this.meterTimer);
    this.meter?.close();
  }
}
