// The voice panel's WebRTC link: one call to /v1/realtime/calls with an ephemeral key.
//
// The browser's microphone track goes to the server as Opus (the browser cancels
// echo, suppresses noise and absorbs jitter); the answer comes back on the same
// audio track and plays through an <audio> element. JSON events travel on the
// `oai-events` data channel, as on the WebSocket (call-link.js). The server's API
// key never takes part: the call carries only an `ek_` key (connection.js
// `api.ephemeralKey`). A call that resumes a parked session posts its offer as
// multipart form data with the `session.resume` event a socket would send first.

import { PeerLink } from "./call-link.js";
import { api } from "./connection.js";

// A 100 ms window of the answer track louder than this counts as audible (stats.trackAudibleMs).
const AUDIBLE_RMS = 0.01;

export class CallLink extends PeerLink {
  constructor(stats) {
    super();
    this.stats = stats;
    this.meter = null;
    this.meterTimer = null;
    this.key = null;
    this.audio = null;
    this.remoteStream = null;
  }

  /** Offer the microphone and the data channel; resolves when the channel is open. `resume` (a
   * `session.resume` event) takes back the parked session it names (docs/voice-protocol.md,
   * Calls); a refusal throws `CallRefused` with the server's code. */
  async open(microphone, model, resume = null) {
    this.key = await api.ephemeralKey({ type: "realtime", model });
    const addMicrophone = (pc) => {
      for (const track of microphone.getAudioTracks()) pc.addTrack(track, microphone);
    };
    await this.dial("oai-events", addMicrophone, (sdp) => this.offer(sdp, resume));
  }

  offer(sdp, resume) {
    const headers = { Authorization: `Bearer ${this.key}` };
    if (!resume) {
      headers["Content-Type"] = "application/sdp";
      return fetch("/v1/realtime/calls", { method: "POST", body: sdp, headers });
    }
    const form = new FormData(); // fetch sets the multipart Content-Type, boundary included
    form.append("sdp", sdp);
    form.append("resume", JSON.stringify(resume));
    const url = `/v1/realtime/calls?session_id=${encodeURIComponent(resume.session_id)}`;
    return fetch(url, { method: "POST", body: form, headers });
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

  close() {
    super.close();
    if (this.audio) this.audio.srcObject = null;
    clearInterval(this.meterTimer);
    this.meter?.close();
  }
}
