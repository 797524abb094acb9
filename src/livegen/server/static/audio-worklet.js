// The voice panel's two audio-thread processors: microphone capture and playback.
//
// They run on the audio rendering thread, so what they report is what the
// sound card took: `pcm-player` counts a sample as played only when it hands
// it to the output, which is what `playback.ack` must tell the server (the
// server truncates history to what the listener heard). The main thread owns
// the socket; these processors only move samples and post counts.

const QUANTUM_REPORT_MS = 100;

/**
 * Microphone in, PCM16 frames out at the session rate.
 * Linear resampling from the context rate (none when they match, the usual
 * case: the page asks for an AudioContext at the session rate). Muted frames
 * are zeros, so the server's voice activity detector hears silence rather than
 * a stalled stream.
 */
class PcmCapture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const settings = options.processorOptions || {};
    this.targetRate = settings.targetRate || 24000;
    this.step = sampleRate / this.targetRate;
    this.frame = new Int16Array(Math.round((this.targetRate * (settings.frameMs || 20)) / 1000));
    this.filled = 0;
    this.sumSquares = 0;
    this.position = 0; // read position in the current block; -1 is the previous block's last sample
    this.previous = 0;
    this.isMuted = false;
    this.port.onmessage = (event) => {
      if (event.data.type === "mute") this.isMuted = Boolean(event.data.muted);
    };
  }

  push(sample) {
    const clipped = Math.max(-1, Math.min(1, this.isMuted ? 0 : sample));
    this.frame[this.filled] = clipped < 0 ? clipped * 0x8000 : clipped * 0x7fff;
    this.sumSquares += clipped * clipped;
    this.filled += 1;
    if (this.filled === this.frame.length) {
      const level = Math.sqrt(this.sumSquares / this.frame.length);
      const pcm = this.frame.slice().buffer;
      this.port.postMessage({ type: "frame", pcm, level }, [pcm]);
      this.filled = 0;
      this.sumSquares = 0;
    }
  }

  process(inputs, outputs) {
    for (const channel of outputs[0] || []) channel.fill(0);
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true;
    const block = channels[0];
    const last = block.length - 1;
    let t = this.position;
    while (t < last) {
      const i = Math.floor(t);
      const a = i < 0 ? this.previous : block[i];
      const b = block[i + 1];
      this.push(a + (b - a) * (t - i));
      t += this.step;
    }
    this.position = t - block.length;
    this.previous = block[last];
    return true;
  }
}

/**
 * Playback through a small jitter buffer, flushed at once on barge-in.
 * The buffer is a delay, not a fill level: audio starts `delayMs` after the
 * first of it arrives (at once if its response has already ended), so every
 * later delta may arrive up to `delayMs` late without a gap, even when the
 * server sends deltas larger than the delay exactly in real time. An underrun
 * goes back to waiting instead of crackling. Reports, per response, the
 * samples really handed to the output.
 */
class PcmPlayer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const settings = options.processorOptions || {};
    this.delay = (settings.delayMs ?? 100) / 1000;
    this.waitingSince = null; // audio-clock time the oldest unplayed audio arrived
    this.reportEvery = Math.round((sampleRate * QUANTUM_REPORT_MS) / 1000);
    this.queue = []; // {samples: Float32Array, offset, responseId}
    this.buffered = 0;
    this.isPlaying = false;
    this.endedResponses = new Set();
    this.played = new Map(); // responseId -> samples handed to the output
    this.current = null;
    this.sinceReport = 0;
    this.numUnderruns = 0;
    this.starved = null; // a response that ran dry before its end; more audio for it is an underrun
    this.port.onmessage = (event) => this.onMessage(event.data);
  }

  onMessage(message) {
    if (message.type === "push") {
      if (message.responseId === this.starved) this.numUnderruns += 1;
      this.starved = null;
      if (this.queue.length === 0 && !this.isPlaying) this.waitingSince = currentTime;
      this.queue.push({ samples: message.samples, offset: 0, responseId: message.responseId });
      this.buffered += message.samples.length;
    } else if (message.type === "end") {
      this.endedResponses.add(message.responseId);
      if (message.responseId === this.starved) this.starved = null;
    } else if (message.type === "flush") {
      const dropped = this.buffered;
      this.queue = [];
      this.buffered = 0;
      this.isPlaying = false;
      this.report("flushed", { dropped });
      this.current = null;
    }
  }

  report(type, extra = {}) {
    const responseId = this.current;
    const played = responseId == null ? 0 : this.played.get(responseId) || 0;
    const underruns = this.numUnderruns;
    this.port.postMessage({ type, responseId, played, buffered: this.buffered, underruns, ...extra });
    this.sinceReport = 0;
  }

  canStart() {
    if (this.queue.length === 0) return false;
    if (currentTime - this.waitingSince >= this.delay) return true;
    // All of the answer is here: nothing left to wait for.
    return this.endedResponses.has(this.queue[this.queue.length - 1].responseId);
  }

  process(inputs, outputs) {
    const out = outputs[0][0];
    if (!this.isPlaying && this.canStart()) this.isPlaying = true;
    let written = 0;
    while (this.isPlaying && written < out.length && this.queue.length > 0) {
      const head = this.queue[0];
      if (head.responseId !== this.current) {
        if (this.current != null) this.report("progress");
        this.current = head.responseId;
        this.report("started");
      }
      const count = Math.min(out.length - written, head.samples.length - head.offset);
      out.set(head.samples.subarray(head.offset, head.offset + count), written);
      head.offset += count;
      written += count;
      this.buffered -= count;
      this.played.set(this.current, (this.played.get(this.current) || 0) + count);
      this.sinceReport += count;
      if (head.offset === head.samples.length) this.queue.shift();
    }
    out.fill(0, written);
    for (let c = 1; c < outputs[0].length; c += 1) outputs[0][c].set(out);
    if (this.isPlaying && this.queue.length === 0) {
      this.isPlaying = false;
      if (!this.endedResponses.has(this.current)) this.starved = this.current;
      this.report("idle");
    } else if (this.sinceReport >= this.reportEvery) {
      this.report("progress");
    }
    return true;
  }
}

registerProcessor("pcm-capture", PcmCapture);
registerProcessor("pcm-player", PcmPlayer);
