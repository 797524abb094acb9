// The world panel: play a world model over WebRTC (/v1/worlds/calls, world-call.js), or over the
// /v1/worlds WebSocket where a call cannot be made (the page says so) or with `?transport=websocket`
// (docs/world-protocol.md).
//
// On the WebSocket the server streams chunks (a `world.chunk` header, then one binary message
// per frame); the page decodes them in order, shows them at the model's fps
// (or as they come, with pacing off) and acks each chunk once its last frame
// is on screen, so flow control follows what the person actually saw. Controls
// come from the model's control tracks in `session.created`: keys and
// on-screen buttons send a track's new value on press and its "none" on
// release (the tracks are sticky). Event ids rise for the whole session, across
// resets. A page opened with a join link (`?join=ID&token=T`, world-players.js) plays another's
// world as its next player, over the WebSocket, steering only the tracks the server gave it.
// Everything the tests look at is also in `window.livegen.world`.

import { api, describeClose } from "./connection.js";
import { WorldCallLink } from "./world-call.js";
import { Invite, joinLink } from "./world-players.js";
import { KEYS_SCHEMA, MOUSE_SCHEMA, listenForInput } from "./world-input.js";
import { decodeFrame, showChunk, showFps } from "./world-readouts.js";
import { DIRECTIONS, buildPad, normalizeTracks } from "./world-tracks.js";

// Offered with the key: a browser that offers subprotocols fails the handshake
// unless the server picks one, and the server never echoes the key itself.
const SUBPROTOCOL = "livegen.world.v1";
// Chunks the server may run ahead of the last one acked. The page acks a chunk
// when its first frame shows (`at: "start"`), so at 1 ahead the next chunk is
// generated while this one plays. Each one ahead adds a chunk (250 ms in the
// room game) of input-to-frame latency, so the page starts at 1 and asks for
// one more each time playback stalls a few times, up to 4.
const MIN_CHUNKS_AHEAD = 1;
const MAX_CHUNKS_AHEAD = 4;
// The chunk length the page asks for: an input waits for the next chunk to start, so one frame a
// chunk answers within about one frame (62.5 ms at 16 fps) plus the server's lead. Models that
// generate frame by frame make it; others answer with their own length in `session.created`.
const FRAMES_PER_CHUNK = 1;
const STALLS_PER_STEP = 3;

export class WorldPanel {
  constructor(root, status) {
    this.root = root;
    this.status = status;
    this.model = null;
    this.el = {
      start: root.querySelector("[data-testid=world-start]"),
      stop: root.querySelector("[data-testid=world-stop]"),
      reset: root.querySelector("[data-testid=world-reset]"),
      canvas: root.querySelector("[data-testid=world-canvas]"),
      overlay: root.querySelector(".overlay"),
      promptForm: root.querySelector(".prompt"),
      prompt: root.querySelector("[data-testid=world-prompt]"),
      pacing: root.querySelector("[data-testid=world-pacing]"),
      pad: root.querySelector(".pad"),
      state: root.querySelector("[data-testid=world-state]"),
      fps: root.querySelector("[data-testid=world-fps]"),
      latency: root.querySelector("[data-testid=world-latency]"),
      chunk: root.querySelector("[data-testid=world-chunk]"),
      model: root.querySelector(".model"),
    };
    this.context2d = this.el.canvas.getContext("2d");
    this.nextEventId = 1;
    this.stats = {
      state: "off",
      chunksReceived: 0,
      framesDrawn: 0,
      acksSent: 0,
      lastChunkIndex: null,
      eventsSent: 0,
      eventsAccepted: 0,
      resets: 0,
      latenciesMs: [],
      fps: 0,
      stalls: 0,
      chunksAhead: MIN_CHUNKS_AHEAD,
      transport: null, // "webrtc" or "websocket", once connected
      fallback: null, // why WebRTC was not used, when it failed
      errors: [],
      player: null, // this page's player number in a shared world it joined
      inviteLink: null, // the last invite link the owner's page showed
    };
    this.joining = joinLink(); // the world this page was opened to join, or null
    this.invite = new Invite(root, status, this.stats, (event) => this.send(event));
    this.clear();
    this.idleWords = this.el.state.textContent;
    this.el.start.addEventListener("click", () => this.start());
    this.el.stop.addEventListener("click", () => this.stop("ended"));
    this.el.reset.addEventListener("click", () => this.reset());
    this.el.pacing.addEventListener("change", () => this.sendPacing());
    this.el.promptForm.addEventListener("submit", (event) => {
      event.preventDefault();
      this.sendPrompt();
    });
    const canvas = this.el.canvas;
    listenForInput(this, canvas);
    requestAnimationFrame((now) => this.tick(now));
  }

  clear() {
    this.ws = null;
    this.spec = null;
    this.tracks = [];
    this.moveTrack = null;
    this.keysTrack = null;
    this.mouseTrack = null;
    this.mouse = { dx: 0, dy: 0, wheel: 0, buttons: 0, sentButtons: 0, timer: null };
    this.heldCodes = []; // codes held on the keys track, in press order
    this.held = []; // direction keys held, latest last
    this.actions = new Map(); // track name -> value last sent
    this.incoming = null;
    this.decoding = Promise.resolve();
    this.generation = 0;
    this.isResetting = false;
    this.queue = [];
    this.nextFrameAt = 0;
    this.drawTimes = [];
    this.sentAt = new Map();
    this.chunksAhead = MIN_CHUNKS_AHEAD;
    this.isStalled = false;
    this.numStalls = 0; // since the last step up
  }

  /** The served model, or null with why: "loading", "locked" (no key yet) or "none". */
  setModel(model, why = "none") {
    if (this.ws) return; // a live session keeps its model
    this.model = model;
    this.el.model.textContent = model ? model.id : why === "loading" ? "loading…" : "";
    const words = {
      loading: "Loading the world model…",
      locked: "Enter the API key above to start.",
      none: "This server serves no world model.",
    };
    this.setState("off", model ? this.idleWords : words[why]);
    // A join link plays as soon as there is a world to join (once the key is in, where needed).
    if (model && this.joining && !this.joinTried) {
      this.joinTried = true;
      this.start();
    }
  }

  setState(state, words) {
    this.stats.state = state;
    this.root.dataset.state = state;
    this.el.state.textContent = words;
    const live = state === "live" || state === "failed" || state === "resetting";
    this.el.start.disabled = live || state === "connecting" || !this.model;
    this.el.stop.disabled = !(live || state === "connecting");
    this.el.reset.disabled = !live || this.joining !== null; // reset is the owner's
    this.el.overlay.hidden = state === "live" || state === "resetting";
    if (state !== "live") this.el.overlay.textContent = words;
  }

  start() {
    if (this.ws) return;
    this.setState("connecting", "Connecting…");
    this.stats.chunksAhead = this.chunksAhead;
    this.stats.fallback = null;
    if (this.joining) this.openSocket(this.joining);
    else if (api.transport === "webrtc") this.call();
    else this.openSocket();
  }

  /** Play over a WebRTC call; if it cannot be made, over the WebSocket, saying why. */
  async call() {
    this.status.set("World: calling /v1/worlds/calls (WebRTC)…", "busy");
    const link = new WorldCallLink(this.el.canvas, (meta, now) => this.onCallFrame(meta, now));
    this.ws = link;
    try {
      await link.open();
    } catch (error) {
      link.close();
      if (this.ws !== link) return; // ended meanwhile
      this.ws = null;
      this.stats.fallback = `WebRTC failed (${error.message}); playing over the WebSocket`;
      this.openSocket();
      return;
    }
    if (this.ws !== link) return link.close();
    this.stats.transport = "webrtc";
    link.onmessage = (event) => this.onServerEvent(JSON.parse(event.data));
    link.onclose = (event) => {
      if (this.ws === link) this.stop("failed", event.reason);
    };
    this.create();
  }

  /** A frame of the call was drawn; `meta` is the chunk it starts, if it starts one. */
  onCallFrame(meta, now) {
    if (meta) showChunk(this, meta, now);
    this.stats.framesDrawn += 1;
    this.drawTimes.push(now);
  }

  /** Play over the WebSocket: a new session, or `joining` ({join, token}) another's as a player. */
  openSocket(joining = null) {
    let words = this.stats.fallback ? `World: ${this.stats.fallback}…` : "World: connecting to /v1/worlds…";
    if (joining) words = `World: joining ${joining.join} as a player…`;
    this.status.set(words, "busy");
    let ws;
    try {
      ws = api.openSocket("/v1/worlds", joining ?? {}, [SUBPROTOCOL]);
    } catch (error) {
      this.fail(error.message);
      return;
    }
    this.ws = ws;
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      this.stats.transport = "websocket";
      if (!joining) this.create(); // a player's session exists: the server seats it
    };
    ws.onmessage = (event) => {
      if (typeof event.data === "string") this.onServerEvent(JSON.parse(event.data));
      else this.onFrame(event.data);
    };
    ws.onclose = (event) => {
      if (this.ws === ws) this.stop(event.code === 1000 ? "ended" : "failed", describeClose(event));
    };
  }

  create() {
    const session = {
      model: this.model.id,
      pacing: this.pacing(),
      output: { format: "png" },
      max_chunks_ahead: this.chunksAhead,
      frames_per_chunk: FRAMES_PER_CHUNK,
    };
    const prompt = this.el.prompt.value.trim();
    if (prompt) session.prompt = prompt;
    this.send({ type: "session.update", session });
  }

  send(event) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(event));
  }

  pacing() {
    return this.el.pacing.checked ? "realtime" : "asap";
  }

  onServerEvent(event) {
    const type = event.type;
    if (type === "session.created") {
      this.onSessionCreated(event.session || {});
      this.invite.show(event.session?.capabilities);
    } else if (type === "player.joined") {
      this.stats.player = event.player;
      this.onSessionCreated(event.session || {}, event.tracks || []);
    } else if (type === "session.player_token.created") {
      this.invite.onCreated(event);
    } else if (type === "world.chunk" && this.ws instanceof WorldCallLink) {
      this.stats.chunksReceived += 1;
      if (!this.isResetting) this.ws.chunk(event); // its frames are on the video track
    } else if (type === "world.chunk") {
      this.incoming = { meta: event, buffers: [] };
      if (event.num_frames === 0) this.onFrame(null);
    } else if (type === "world.event.accepted") {
      this.stats.eventsAccepted += 1;
    } else if (type === "world.reset.done") {
      this.isResetting = false;
      this.stats.resets += 1;
      this.dropQueued();
      this.setState("live", this.liveWords());
      this.status.set("World: reset", "ok");
    } else if (type === "session.updated") {
      const pacing = event.session?.pacing;
      if (pacing) this.el.pacing.checked = pacing === "realtime";
    } else if (type === "session.closed") {
      this.stop("closed", "Closed by the server. Press Start to play again.");
    } else if (type === "error") {
      this.onError(event.error || {});
    }
  }

  /** The session to play; `own`: the tracks this page steers (a joined player's, or the owner's). */
  onSessionCreated(session, own = session.capabilities?.controls) {
    this.spec = {
      id: session.id,
      width: session.width || 32,
      height: session.height || 32,
      fps: session.fps || 16,
      framesPerChunk: session.frames_per_chunk || 1,
    };
    this.el.canvas.width = this.spec.width;
    this.el.canvas.height = this.spec.height;
    this.el.canvas.parentElement.style.aspectRatio = `${this.spec.width} / ${this.spec.height}`;
    // A shared world's other players' tracks are theirs: the pad shows the ones this page steers.
    this.tracks = normalizeTracks((session.controls || []).filter((c) => !own || own.includes(c.track)));
    this.moveTrack = this.tracks.find((track) => DIRECTIONS.every((d) => track.values.includes(d))) || null;
    this.keysTrack = this.tracks.find((track) => track.schema === KEYS_SCHEMA) || null;
    this.mouseTrack = this.tracks.find((track) => track.schema === MOUSE_SCHEMA) || null;
    this.buildPad();
    this.setState("live", this.liveWords());
    const over = this.stats.transport === "webrtc" ? "over WebRTC" : "over the WebSocket";
    const size = `${this.spec.width}×${this.spec.height} at ${this.spec.fps} fps`;
    if (this.stats.player) {
      this.status.set(`World: player ${this.stats.player} in ${this.spec.id}, ${size}, ${over}`, "ok");
      return;
    }
    this.status.set(`World: live, ${size}, ${this.stats.fallback ?? over}`, this.stats.fallback ? "warn" : "ok");
  }

  liveWords() {
    const who = this.stats.player ? `Player ${this.stats.player}` : "Live";
    return this.moveTrack ? `${who} — move with the arrow keys or WASD` : who;
  }

  onError(error) {
    const words = error.message || error.code || "server error";
    this.stats.errors.push(error.code || words);
    // Refused before any session is playing (a full server, a bad or expired join link): nothing
    // will come, so the panel stops with the server's own words rather than hang on "Connecting".
    if (this.ws && !this.spec) {
      this.stop("failed", words);
      return;
    }
    if (error.code === "single_player_model") this.invite.onRefused();
    if (error.code === "chunk_failed") {
      this.setState("failed", "The world failed. Press Reset to start it again.");
      this.status.set(`World: ${words}`, "error");
    } else {
      this.status.set(`World: ${words}`, "warn");
    }
  }

  onFrame(buffer) {
    const chunk = this.incoming;
    if (!chunk) return;
    if (buffer) chunk.buffers.push(buffer);
    if (chunk.buffers.length < chunk.meta.num_frames) return;
    this.incoming = null;
    this.stats.chunksReceived += 1;
    if (this.isResetting) return; // the old world's last chunks; the server forgets their credit on reset
    const generation = this.generation;
    // Chained, so chunks reach the screen in order however long each takes to decode.
    this.decoding = this.decoding.then(async () => {
      let frames;
      try {
        frames = await Promise.all(chunk.buffers.map((data) => decodeFrame(data, chunk.meta)));
      } catch (error) {
        // Shown as a held frame; still acked when its turn comes, so the stream goes on.
        frames = chunk.buffers.map(() => null);
        this.stats.errors.push(`frame decode: ${error.message}`);
        this.status.set(`World: a ${chunk.meta.format} frame could not be decoded`, "warn");
      }
      if (generation === this.generation) this.queue.push({ meta: chunk.meta, frames, next: 0 });
    });
  }

  tick(now) {
    requestAnimationFrame((next) => this.tick(next));
    showFps(this, now);
    const head = this.queue[0];
    if (!this.spec) return;
    const interval = 1000 / this.spec.fps;
    if (!head) {
      if (this.isLate(now, interval)) this.onStall();
      return;
    }
    this.isStalled = false;
    if (this.pacing() === "realtime") {
      if (now < this.nextFrameAt) return;
      // Keep the cadence; after a stall, start it again rather than rushing to catch up.
      this.nextFrameAt = now - this.nextFrameAt > interval ? now + interval : this.nextFrameAt + interval;
    }
    this.draw(head, now);
  }

  /** A frame was due a while ago and none is here: playback is stalling. */
  isLate(now, interval) {
    const isStreaming = this.stats.state === "live" && this.pacing() === "realtime" && this.nextFrameAt > 0;
    return isStreaming && now > this.nextFrameAt + interval / 2;
  }

  onStall() {
    if (this.isStalled) return; // one stall until a frame comes again
    this.isStalled = true;
    this.stats.stalls += 1;
    this.numStalls += 1;
    // Flow control is the owner's: a joined player only shows what comes.
    const canStep = !this.stats.player && this.chunksAhead < MAX_CHUNKS_AHEAD;
    if (this.numStalls >= STALLS_PER_STEP && canStep) {
      this.numStalls = 0;
      this.chunksAhead += 1;
      this.stats.chunksAhead = this.chunksAhead;
      this.send({ type: "session.update", session: { max_chunks_ahead: this.chunksAhead } });
    }
  }

  draw(chunk, now) {
    const frame = chunk.frames[chunk.next];
    if (frame) {
      if (frame instanceof ImageData) this.context2d.putImageData(frame, 0, 0);
      else this.context2d.drawImage(frame, 0, 0, this.spec.width, this.spec.height);
    }
    if (chunk.next === 0) {
      showChunk(this, chunk.meta, now);
      // Credit back as the chunk starts playing: the next one is generated while it plays.
      this.send({ type: "chunk.ack", chunk_index: chunk.meta.chunk_index, at: "start" });
      this.stats.acksSent += 1;
    }
    chunk.next += 1;
    this.stats.framesDrawn += 1;
    this.drawTimes.push(now);
    if (chunk.next >= chunk.frames.length) this.queue.shift();
  }

  dropQueued() {
    if (this.ws instanceof WorldCallLink) this.ws.forget();
    this.generation += 1;
    this.queue = [];
    this.incoming = null;
    this.nextFrameAt = 0;
  }

  sendEvent(fields) {
    const eventId = this.nextEventId;
    this.nextEventId += 1;
    this.sentAt.set(eventId, performance.now());
    this.stats.eventsSent += 1;
    this.send({ type: "world.event", event_id: eventId, ...fields });
    return eventId;
  }

  setControl(track, value) {
    if (!this.ws || this.stats.state !== "live" || this.actions.get(track.name) === value) return;
    this.actions.set(track.name, value);
    const control = { track: track.name, data: { [track.field]: value } };
    if (track.schema) control.schema = track.schema;
    this.sendEvent({ controls: [control] });
    for (const button of this.el.pad.querySelectorAll("button")) {
      button.classList.toggle("held", button.dataset.track === track.name && button.dataset.value === value);
    }
  }

  buildPad() {
    buildPad(this);
  }

  sendPrompt() {
    const prompt = this.el.prompt.value.trim();
    if (!prompt || !this.ws || this.stats.state !== "live") return;
    if (this.stats.player) {
      this.status.set("World: only the world's owner (player 1) sets the prompt", "warn");
      return;
    }
    this.sendEvent({ prompt });
    this.status.set(`World: prompt sent: “${prompt}”`, "ok");
  }

  sendPacing() {
    this.nextFrameAt = 0; // a new cadence starts with the next frame
    // A joined player's toggle paces its own drawing only: the session's pacing is the owner's.
    if (this.ws && !this.stats.player) this.send({ type: "session.update", session: { pacing: this.pacing() } });
  }

  reset() {
    if (!this.ws || this.stats.player) return;
    this.isResetting = true;
    this.dropQueued();
    this.actions.clear();
    this.held = [];
    this.heldCodes = [];
    this.send({ type: "world.reset" });
    this.setState("resetting", "Resetting…");
  }

  fail(words) {
    this.stats.errors.push(words);
    this.stop("failed", words);
  }

  stop(state, words) {
    const ws = this.ws;
    this.ws = null;
    if (ws) {
      ws.onclose = null;
      // A player leaves by closing: ending the session is the owner's.
      if (ws.readyState === WebSocket.OPEN && state === "ended" && !this.stats.player) {
        ws.send(JSON.stringify({ type: "session.close" }));
      }
      if (ws.readyState <= WebSocket.OPEN) ws.close(1000);
    }
    const stats = this.stats;
    this.clear();
    this.stats = stats;
    this.el.pad.replaceChildren();
    this.invite.hide();
    this.el.fps.textContent = "–";
    if (state === "failed") {
      this.setState("failed-closed", `Stopped: ${words}`);
      this.status.set(`World: ${words}`, "error");
    } else {
      this.setState("off", words || "Ended. Press Start to play again.");
      this.status.set("World: ended", "info");
    }
  }
}
