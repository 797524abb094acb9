// What the voice panel remembers of its call across a reload, so the reloaded page
// takes the session back (docs/voice-protocol.md, Calls): the session id, its
// resume token, how many of the session's events the page received, and the
// conversation it showed then. All four are saved together in sessionStorage
// (this tab only), so the count always matches what the saved conversation
// shows: the server's replay brings exactly what came after it.
//
// The count follows the server's numbering: every message on the call's channel
// counts except `session.resumed` (not numbered), the call's own
// `output_audio_buffer.stopped`/`.cleared` and `too_many_events` errors.

const STORAGE = "livegen.voiceCall";
// Saves are coalesced: a burst of transcript deltas writes once. The page's leaving saves at once.
const SAVE_DELAY_MS = 200;
const UNNUMBERED = new Set(["session.resumed", "output_audio_buffer.stopped", "output_audio_buffer.cleared"]);

function isNumbered(event) {
  return !UNNUMBERED.has(event.type) && !(event.type === "error" && event.error?.code === "too_many_events");
}

export class CallMemory {
  /** `conversation()`: what the panel shows now (given back as `CallMemory.saved().conversation`). */
  constructor(conversation) {
    this.conversation = conversation;
    this.call = null; // {sessionId, token, seq} of the call being counted, or null
    this.timer = null;
    this.isLeaving = false;
    window.addEventListener("pagehide", () => {
      this.save();
      this.isLeaving = true; // what the closing call does now must not forget it
    });
    // Back from the back/forward cache: the page lives on, and so does what it saves.
    window.addEventListener("pageshow", () => (this.isLeaving = false));
  }

  /** The call saved before the page (re)loaded, or null. */
  static saved() {
    try {
      const saved = JSON.parse(sessionStorage.getItem(STORAGE));
      return saved?.sessionId && saved.token ? saved : null;
    } catch {
      return null;
    }
  }

  /** Count a call's events from here: a new call (`from` null) or the resumed `from` (a saved call). */
  begin(from = null) {
    this.call = from ? { sessionId: from.sessionId, token: from.token, seq: from.seq } : { seq: 0 };
  }

  /** The `session.resume` event that takes `saved`'s session back. */
  static resumeEvent(saved) {
    return {
      type: "session.resume",
      session_id: saved.sessionId,
      resume_token: saved.token,
      last_event_seq: saved.seq,
    };
  }

  /** One event received on the call's channel. */
  note(event) {
    const call = this.call;
    if (!call) return;
    if (isNumbered(event)) call.seq += 1;
    if (event.type === "session.created") call.sessionId = event.session?.id;
    if (typeof event.resume_token === "string") call.token = event.resume_token; // a resume voids the old one
    if (call.sessionId && call.token && this.timer === null) {
      this.timer = setTimeout(() => this.save(), SAVE_DELAY_MS);
    }
  }

  save() {
    clearTimeout(this.timer);
    this.timer = null;
    if (!this.call?.sessionId || !this.call.token || this.isLeaving) return;
    try {
      sessionStorage.setItem(STORAGE, JSON.stringify({ ...this.call, conversation: this.conversation() }));
    } catch {
      // Over the storage quota: the last save stays, consistent with itself; a resume replays the rest.
    }
  }

  /** The call ended here (stopped, refused or lost for good): nothing to take back after a reload. */
  forget() {
    if (this.isLeaving) return; // the page is unloading: the parked session is what a reload takes back
    clearTimeout(this.timer);
    this.timer = null;
    this.call = null;
    sessionStorage.removeItem(STORAGE);
  }
}
