// The voice panel: talk to a voice model over /v1/realtime (OpenAI Realtime, GA names).
//
// The microphone goes through the `pcm-capture` worklet as PCM16 at the
// session's rate; answers play through the `pcm-player` worklet's jitter
// buffer. The server detects turns (server_vad) and barge-in; the page flushes
// its buffer the moment the user speaks over an answer or presses Interrupt,
// and tells the server what was really heard with `playback.ack`. Everything
// the tests look at is also in `window.livegen.voice`.
//
// By default the session is a WebRTC call (webrtc.js): the microphone and the
// answer travel on the call's audio track, the events on its data channel, and
// the server silences the track on a barge-in. Where WebRTC fails, the panel
// falls back to the WebSocket and says so; `?transport=websocket` forces it.
//
// A call survives a reload: the session parks on the server, and the reloaded
// page takes it back with a new call that resumes it (call-memory.js keeps what
// that needs); the conversation shown before goes on. If the server refuses the
// resume, the page starts a new session and says so.

import { CallRefused } from "./call-link.js";
import { CallMemory } from "./call-memory.js";
import { api, base64ToBytes, bytesToBase64, describeClose, median } from "./connection.js";
import { Conversation } from "./voice-conversation.js";
import { CallLink } from "./webrtc.js";

const DEFAULT_RATE = 24000;
const LISTENING = "Listening — just talk";
const ACK_EVERY_MS = 250;
// How late a delta may arrive without a gap; also what the first sound waits.
const JITTER_DELAY_MS = 100;
const SEND_LOG_LIMIT = 3000; // ~60 s of 20 ms frames, to map audio_end_ms to a wall time

const AUDIO_DELTA = new Set(["response.output_audio.delta", "response.audio.delta"]);
const AUDIO_DONE = new Set(["response.output_audio.done", "response.audio.done"]);
const TEXT_DELTA = new Set([
  "response.output_audio_transcript.delta",
  "response.audio_transcript.delta",
  "response.output_text.delta",
  "response.text.delta",
]);
const TEXT_DONE = new Map([
  ["response.output_audio_transcript.done", "transcript"],
  ["response.audio_transcript.done", "transcript"],
  ["response.output_text.done", "text"],
  ["response.text.done", "text"],
]);
// What a refused resume of a parked session is told with, on the offer or on the new call's channel.
const RESUME_REFUSALS = new Set([
  "invalid_resume_token",
  "session_not_found",
  "invalid_resume",
  "resume_gap",
  "invalid_value",
]);

export class VoicePanel {
  constructor(root, status) {
    this.root = root;
    this.status = status;
    this.model = null;
    this.el = {
      start: root.querySelector("[data-testid=voice-start]"),
      stop: root.querySelector("[data-testid=voice-stop]"),
      mute: root.querySelector("[data-testid=voice-mute]"),
      interrupt: root.querySelector("[data-testid=voice-interrupt]"),
      state: root.querySelector("[data-testid=voice-state]"),
      level: root.querySelector(".meter-fill"),
      log: root.querySelector(".conversation"),
      latency: root.querySelector("[data-testid=voice-latency]"),
      played: root.querySelector("[data-testid=voice-played]"),
      model: root.querySelector(".model"),
    };
    this.stats = {
      state: "off",
      framesSent: 0,
      audioDeltas: 0,
      receivedSamples: 0,
      playedSamples: 0,
      acksSent: 0,
      lastAck: null,
      flushes: 0,
      underruns: 0,
      turnLatenciesMs: [],
      responses: {},
      errors: [],
      transport: null,
      fallback: null,
      trackEvents: [],
      trackAudibleMs: 0,
      sessionId: null,
      callId: null,
      resume: null, // "resumed", or "refused: <why>" when a reloaded page could not take its call back
    };
    this.memory = new CallMemory(() => this.conversation.saved());
    this.saved = CallMemory.saved(); // the call this page had before it reloaded, taken back once ready
    this.idleWords = this.el.state.textContent;
    this.el.start.addEventListener("click", () => this.start());
    this.el.stop.addEventListener("click", () => this.stop("ended"));
    this.el.mute.addEventListener("click", () => this.toggleMute());
    this.el.interrupt.addEventListener("click", () => this.interrupt());
    this.reset();
  }

  reset() {
    this.ws = null;
    this.context = null;
    this.stream = null;
    this.capture = null;
    this.player = null;
    this.isMuted = false;
    this.inputRate = DEFAULT_RATE;
    this.outputRate = DEFAULT_RATE;
    this.sentSamples = 0;
    this.sendLog = [];
    this.speechEndedAt = null;
    this.responseId = null; // the response whose audio is arriving now
    this.droppedResponses = new Set();
    this.lastAckAt = new Map();
    this.conversation = new Conversation(this.el.log);
    this.itemResponses = new Map(); // assistant item id -> its response id
    this.isResuming = false; // a resuming call, until its session.resumed
    this.refusal = null; // why the resume this session replaces was refused (said when it goes live)
  }

  /** The served model, or null with why: "loading", "locked" (no key yet) or "none". */
  setModel(model, why = "none") {
    if (this.ws || this.stats.state === "connecting") return; // a session keeps its model
    this.model = model;
    this.el.model.textContent = model ? model.id : why === "loading" ? "loading…" : "";
    const words = {
      loading: "Loading the voice model…",
      locked: "Enter the API key above to start.",
      none: "This server serves no voice model.",
    };
    this.setState("off", model ? this.idleWords : words[why]);
    if (model && this.saved && api.transport === "webrtc") this.start(this.saved);
    this.saved = null;
  }

  setState(state, words) {
    this.stats.state = state;
    this.root.dataset.state = state;
    this.el.state.textContent = words;
    const live = state === "connecting" || state === "live";
    this.el.start.disabled = live || !this.model;
    this.el.stop.disabled = !live;
    this.el.mute.disabled = state !== "live";
    this.el.interrupt.disabled = state !== "live";
  }

  fail(words) {
    this.stats.errors.push(words);
    this.status.set(`Voice: ${words}`, "error");
    this.stop("failed", words);
  }

  /** Start a session: a new one, or (`saved`, a reloaded page's call) the parked one it names. */
  async start(saved = null) {
    if (this.ws) return;
    this.setState("connecting", "Connecting…");
    this.status.set("Voice: asking for the microphone…", "busy");
    try {
      // Made inside the click, so the browser lets it play sound.
      this.context = new AudioContext({ sampleRate: DEFAULT_RATE, latencyHint: "interactive" });
      const worklet = this.context.audioWorklet.addModule("/static/audio-worklet.js");
      this.stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
      });
      await worklet;
      this.ws = await this.connect(saved);
    } catch (error) {
      const words =
        error.name === "NotAllowedError"
          ? "the microphone is blocked: allow it in the browser's site settings"
          : error.name === "NotFoundError"
            ? "no microphone found"
            : error.message;
      this.fail(words);
      return;
    }
    this.listenTo(this.ws);
  }

  listenTo(ws) {
    ws.onmessage = (message) => {
      const event = JSON.parse(message.data);
      if (ws instanceof CallLink) this.memory.note(event);
      this.onServerEvent(event);
    };
    ws.onclose = (event) => {
      if (this.ws === ws) this.stop(event.code === 1000 ? "ended" : "failed", describeClose(event));
    };
    ws.onerror = () => {};
  }

  /** A WebRTC call (resuming `saved`'s session if the server still has it), or the WebSocket
   * where WebRTC is off or fails (said on the status line). */
  async connect(saved = null) {
    if (api.transport === "webrtc") {
      let call = null;
      if (saved) call = await this.call(saved);
      if (call === null) call = await this.call(null);
      if (call) return call;
    } else {
      this.status.set("Voice: connecting to /v1/realtime…", "busy");
    }
    this.stats.transport = "websocket";
    return api.openSocket("/v1/realtime", { model: this.model.id }, ["realtime"]);
  }

  /** A call, or null where a resume was refused (a new call may follow), or false where WebRTC
   * failed (the WebSocket follows). */
  async call(saved) {
    const words = saved ? "Voice: taking the call back over WebRTC…" : "Voice: calling over WebRTC…";
    this.status.set(words, "busy");
    const call = new CallLink(this.stats);
    this.ws = call; // stop() during the call's setup closes it
    try {
      await call.open(this.stream, this.model.id, saved && CallMemory.resumeEvent(saved));
      if (this.ws !== call) throw new Error("stopped");
      this.stats.transport = "webrtc";
      this.stats.callId = call.callId; // a backend may attach to it (/v1/realtime?call_id=)
      this.memory.begin(saved);
      this.isResuming = Boolean(saved);
      this.resumedFrom = saved;
      return call;
    } catch (error) {
      call.close();
      if (this.ws !== call) throw error;
      if (saved && error instanceof CallRefused && [400, 404].includes(error.status)) {
        this.resumeRefused(error.message);
        return null;
      }
      this.stats.fallback = error.message;
      this.status.set(`Voice: WebRTC failed (${error.message}); using the WebSocket`, "warn");
      return false;
    }
  }

  resumeRefused(words) {
    this.memory.forget();
    this.refusal = words;
    this.stats.resume = `refused: ${words}`;
  }

  /** The resuming call's channel refused the resume (before `session.resumed`): a new call. */
  async replaceRefusedCall(words) {
    const refused = this.ws;
    refused.onclose = null;
    refused.close();
    this.resumeRefused(words);
    this.ws = null;
    try {
      this.ws = await this.connect();
    } catch (error) {
      this.fail(error.message);
      return;
    }
    this.listenTo(this.ws);
  }

  /** The reloaded page has its call back: what it showed before, then the replay, then live. */
  onResumed(event) {
    this.isResuming = false;
    this.stats.sessionId = event.session_id;
    this.stats.resume = "resumed";
    const interrupted = this.conversation.show(this.resumedFrom?.conversation || []);
    interrupted.forEach((id) => this.droppedResponses.add(id));
    this.startAudio({}); // a call's audio is its track; the worklets only meter the microphone
    this.setState("live", LISTENING);
    const missed = event.latest_seq - event.last_event_seq;
    const words = `Voice: took the call back over WebRTC (${missed} events missed meanwhile), listening`;
    this.status.set(words, "ok");
  }

  get isCall() {
    return this.ws instanceof CallLink;
  }

  startAudio(session) {
    const input = session.audio?.input?.format;
    const output = session.audio?.output?.format;
    this.inputRate = input?.rate || DEFAULT_RATE;
    this.outputRate = output?.rate || DEFAULT_RATE;
    this.capture = new AudioWorkletNode(this.context, "pcm-capture", {
      numberOfOutputs: 1,
      processorOptions: { targetRate: this.inputRate, frameMs: 20 },
    });
    this.capture.port.onmessage = (event) => this.onCaptureFrame(event.data);
    this.context.createMediaStreamSource(this.stream).connect(this.capture);
    this.capture.connect(this.context.destination); // it outputs silence; being pulled keeps it running
    this.player = new AudioWorkletNode(this.context, "pcm-player", {
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { delayMs: JITTER_DELAY_MS },
    });
    this.player.port.onmessage = (event) => this.onPlayerReport(event.data);
    this.player.connect(this.context.destination);
    this.context.resume();
  }

  send(event) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(event));
  }

  onCaptureFrame(message) {
    this.showLevel(message.level);
    if (this.stats.state !== "live" || this.isCall) return; // a call's microphone is its track
    const pcm = new Uint8Array(message.pcm);
    this.send({ type: "input_audio_buffer.append", audio: bytesToBase64(pcm) });
    this.sentSamples += pcm.length / 2;
    this.stats.framesSent += 1;
    this.sendLog.push({ endMs: (this.sentSamples / this.inputRate) * 1000, at: performance.now() });
    if (this.sendLog.length > SEND_LOG_LIMIT) this.sendLog.shift();
  }

  showLevel(rms) {
    const db = 20 * Math.log10(Math.max(rms, 1e-5));
    const fraction = this.isMuted ? 0 : Math.max(0, Math.min(1, (db + 60) / 60));
    this.el.level.style.clipPath = `inset(0 ${(100 - fraction * 100).toFixed(1)}% 0 0)`;
  }

  onServerEvent(event) {
    const type = event.type;
    if (type === "session.created") {
      this.stats.sessionId = event.session?.id ?? null;
      this.startAudio(event.session || {});
      this.setState("live", LISTENING);
      const over = this.isCall ? "over WebRTC" : "over the WebSocket";
      const fallback = this.stats.fallback ? ` (WebRTC failed: ${this.stats.fallback})` : "";
      const refused = this.refusal
        ? `; the call before the reload could not be taken back (${this.refusal})`
        : "";
      const level = fallback || refused ? "warn" : "ok";
      this.status.set(`Voice: connected ${over}${fallback}, listening${refused}`, level);
    } else if (type === "session.resumed") {
      this.onResumed(event);
    } else if (this.isResuming && type === "error" && RESUME_REFUSALS.has(event.error?.code)) {
      this.isResuming = false;
      this.replaceRefusedCall(event.error.message || event.error.code);
    } else if (type === "input_audio_buffer.speech_started") {
      this.bargeIn();
      this.speechEndedAt = null; // a new turn: latency counts from where this one ends
      this.conversation.user(event.item_id).classList.add("pending");
      this.el.state.textContent = "Hearing you…";
    } else if (type === "input_audio_buffer.speech_stopped") {
      this.speechEndedAt = this.wallTimeOf(event.audio_end_ms);
      this.el.state.textContent = "Thinking…";
    } else if (type === "conversation.item.input_audio_transcription.delta") {
      const bubble = this.conversation.user(event.item_id);
      bubble.querySelector(".text").textContent += event.delta || "";
    } else if (type === "conversation.item.input_audio_transcription.completed") {
      const bubble = this.conversation.user(event.item_id);
      bubble.classList.remove("pending");
      bubble.querySelector(".text").textContent = event.transcript || "(nothing heard)";
    } else if (type === "response.created") {
      this.responseId = event.response?.id ?? null;
      this.conversation.assistant(this.responseId);
    } else if (AUDIO_DELTA.has(type)) {
      this.onAudioDelta(event);
    } else if (AUDIO_DONE.has(type)) {
      this.player?.port.postMessage({ type: "end", responseId: event.response_id });
    } else if (TEXT_DELTA.has(type)) {
      if (this.droppedResponses.has(event.response_id)) return;
      this.conversation.assistant(event.response_id).querySelector(".text").textContent += event.delta || "";
    } else if (TEXT_DONE.has(type)) {
      const text = event[TEXT_DONE.get(type)];
      const bubble = this.conversation.assistant(event.response_id);
      if (text && !this.droppedResponses.has(event.response_id)) {
        bubble.querySelector(".text").textContent = text;
      }
    } else if (type === "response.done") {
      this.onResponseDone(event.response || {});
    } else if (type.startsWith("output_audio_buffer.")) {
      this.onTrackEvent(event);
    } else if (type === "conversation.item.truncated") {
      // The server cut this answer to what was heard; ask for the heard text to show it.
      this.send({ type: "conversation.item.retrieve", item_id: event.item_id });
    } else if (type === "conversation.item.retrieved") {
      this.showHeard(event.item || {});
    } else if (type === "error") {
      const error = event.error || {};
      this.stats.errors.push(error.message || error.code);
      this.status.set(`Voice: ${error.message || error.code || "server error"}`, "error");
    }
  }

  onAudioDelta(event) {
    const id = event.response_id;
    if (event.item_id) {
      this.itemResponses.set(event.item_id, id);
      this.responseStats(id).itemId = event.item_id;
    }
    if (this.droppedResponses.has(id) || !this.player) return;
    const pcm = base64ToBytes(event.delta);
    const ints = new Int16Array(pcm.buffer, 0, pcm.length >> 1);
    let samples = new Float32Array(ints.length);
    for (let i = 0; i < ints.length; i += 1) samples[i] = ints[i] / 0x8000;
    if (this.outputRate !== this.context.sampleRate) {
      samples = resample(samples, this.outputRate, this.context.sampleRate);
    }
    this.stats.audioDeltas += 1;
    this.stats.receivedSamples += samples.length;
    this.responseStats(id).receivedMs += (samples.length / this.context.sampleRate) * 1000;
    this.player.port.postMessage({ type: "push", responseId: id, samples }, [samples.buffer]);
    this.el.state.textContent = "Speaking — talk over it to interrupt";
  }

  onResponseDone(response) {
    const id = response.id;
    this.player?.port.postMessage({ type: "end", responseId: id });
    this.responseStats(id).status = response.status;
    if (response.status && response.status !== "completed") this.conversation.tag(id, response.status, true);
    if (response.status === "cancelled") this.flushPlayback(id);
  }

  /** A call's answer track: started (latency measured here), stopped, or cleared by the server. */
  onTrackEvent(event) {
    this.stats.trackEvents.push({ type: event.type, response_id: event.response_id });
    if (event.type === "output_audio_buffer.started") {
      this.responseId = event.response_id ?? this.responseId;
      this.el.state.textContent = "Speaking — talk over it to interrupt";
      if (this.speechEndedAt != null) this.onPlayerReport({ type: "started", responseId: null });
    } else if (event.type === "output_audio_buffer.cleared" && event.response_id) {
      this.flushPlayback(event.response_id);
    } else if (this.stats.state === "live" && !this.isMuted) {
      this.el.state.textContent = LISTENING;
    }
  }

  /** An interrupted answer: what was heard stays, the rest is struck through. */
  showHeard(item) {
    const responseId = this.itemResponses.get(item.id);
    const part = (item.content || [])[0] || {};
    const heard = part.transcript ?? part.text;
    if (responseId == null || item.role !== "assistant" || typeof heard !== "string") return;
    this.conversation.showHeard(responseId, heard);
  }

  /** The user spoke over an answer: silence it now. */
  bargeIn() {
    if (this.isAnswering()) this.flushPlayback(this.responseId);
  }

  interrupt() {
    if (this.isCall) {
      // The server owns the track: it cuts the audio and the history to what was sent.
      this.send({ type: "output_audio_buffer.clear" });
      return;
    }
    if (!this.isAnswering()) return;
    const id = this.responseId;
    const stats = this.responseStats(id);
    if (stats.status === "in_progress") {
      this.send({ type: "response.cancel", response_id: id });
    } else if (stats.itemId) {
      // Generated already, still playing here: cut the history to what was heard.
      const playedMs = Math.floor((stats.playedSamples / this.context.sampleRate) * 1000);
      this.send({
        type: "conversation.item.truncate",
        item_id: stats.itemId,
        content_index: 0,
        audio_end_ms: playedMs,
      });
    }
    this.flushPlayback(id);
  }

  /** An answer is still being generated, or some of it is still to be heard. */
  isAnswering() {
    const id = this.responseId;
    if (id == null || this.droppedResponses.has(id)) return false;
    const stats = this.responseStats(id);
    const unplayedMs = stats.receivedMs - (stats.playedSamples / this.context.sampleRate) * 1000;
    return stats.status === "in_progress" || unplayedMs > 1;
  }

  flushPlayback(responseId) {
    if (this.droppedResponses.has(responseId)) return;
    this.droppedResponses.add(responseId);
    this.stats.flushes += 1;
    this.player?.port.postMessage({ type: "flush" });
    if (this.stats.state === "live" && !this.isMuted) this.el.state.textContent = LISTENING;
    this.conversation.tag(responseId, "interrupted");
  }

  onPlayerReport(report) {
    const id = report.responseId;
    if (report.type === "started" && this.speechEndedAt != null) {
      const latency = performance.now() - this.speechEndedAt + (this.context.outputLatency || 0) * 1000;
      this.stats.turnLatenciesMs.push(Math.round(latency));
      this.speechEndedAt = null;
      const last = Math.round(latency);
      const typical = Math.round(median(this.stats.turnLatenciesMs));
      this.el.latency.textContent = `${last} ms (median ${typical} ms)`;
    }
    if (report.underruns != null) this.stats.underruns = report.underruns;
    if (report.type === "idle") {
      const done = id != null && this.responseStats(id).status !== "in_progress";
      if (done && this.stats.state === "live" && !this.isMuted) this.el.state.textContent = LISTENING;
    }
    if (id == null) return;
    const stats = this.responseStats(id);
    const newly = report.played - stats.playedSamples;
    if (newly > 0) {
      stats.playedSamples = report.played;
      this.stats.playedSamples += newly;
      this.el.played.textContent = `${(this.stats.playedSamples / this.context.sampleRate).toFixed(1)} s`;
    }
    const isFinal = report.type === "flushed" || report.type === "idle";
    const last = this.lastAckAt.get(id) || 0;
    if (newly > 0 || isFinal) {
      if (isFinal || performance.now() - last >= ACK_EVERY_MS) this.ack(id, stats.playedSamples);
    }
  }

  ack(responseId, playedSamples) {
    const playedMs = Math.round((playedSamples / this.context.sampleRate) * 1000);
    const previous = this.stats.lastAck;
    if (previous && previous.response_id === responseId && previous.played_ms === playedMs) return;
    this.send({ type: "playback.ack", response_id: responseId, played_ms: playedMs });
    this.stats.acksSent += 1;
    this.stats.lastAck = { response_id: responseId, played_ms: playedMs };
    this.lastAckAt.set(responseId, performance.now());
  }

  responseStats(id) {
    if (!(id in this.stats.responses)) {
      this.stats.responses[id] = { receivedMs: 0, playedSamples: 0, status: "in_progress" };
    }
    return this.stats.responses[id];
  }

  /** When the audio up to `audioEndMs` (session input time) left this page. */
  wallTimeOf(audioEndMs) {
    if (typeof audioEndMs !== "number") return performance.now();
    const entry = this.sendLog.find((sent) => sent.endMs >= audioEndMs);
    return entry ? entry.at : performance.now();
  }

  toggleMute() {
    this.isMuted = !this.isMuted;
    this.capture?.port.postMessage({ type: "mute", muted: this.isMuted });
    // A call sends the microphone track itself; a disabled track sends silence.
    this.stream?.getAudioTracks().forEach((track) => (track.enabled = !this.isMuted));
    this.el.mute.textContent = this.isMuted ? "Unmute" : "Mute";
    this.el.mute.setAttribute("aria-pressed", String(this.isMuted));
    this.el.state.textContent = this.isMuted ? "Muted — the model hears silence" : LISTENING;
  }

  stop(state, words) {
    const ws = this.ws;
    this.ws = null;
    this.memory.forget();
    if (ws) {
      // Tell the server what was heard before leaving.
      if (this.responseId != null && this.context) {
        const stats = this.responseStats(this.responseId);
        if (ws.readyState === WebSocket.OPEN && stats.playedSamples > 0) {
          ws.send(
            JSON.stringify({
              type: "playback.ack",
              response_id: this.responseId,
              played_ms: Math.round((stats.playedSamples / this.context.sampleRate) * 1000),
            }),
          );
        }
      }
      ws.onclose = null;
      if (ws.readyState === WebSocket.OPEN && state === "ended") {
        ws.send(JSON.stringify({ type: "session.close" }));
      }
      if (ws.readyState <= WebSocket.OPEN) ws.close(1000);
    }
    this.stream?.getTracks().forEach((track) => track.stop());
    this.context?.close();
    this.showLevel(0);
    const stats = this.stats;
    this.reset();
    this.stats = stats;
    this.el.mute.textContent = "Mute";
    if (state === "failed") {
      this.setState("failed", `Stopped: ${words}`);
      this.status.set(`Voice: ${words}`, "error");
    } else {
      this.setState("off", words || "Ended. Press Start to talk again.");
      this.status.set("Voice: ended", "info");
    }
  }
}

/** Linear resampling of one delta; good enough for speech between common rates. */
function resample(samples, fromRate, toRate) {
  const out = new Float32Array(Math.round((samples.length * toRate) / fromRate));
  const step = fromRate / toRate;
  for (let i = 0; i < out.length; i += 1) {
    const t = i * step;
    const j = Math.floor(t);
    const a = samples[j] ?? 0;
    const b = samples[j + 1] ?? a;
    out[i] = a + (b - a) * (t - j);
  }
  return out;
}
